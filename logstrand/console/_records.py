"""A log's records for the console: a page of them from an LSN or a time,
and the live tail, pushed as server-sent events.

Payloads, keys and header values are shown as they decode: JSON (parsed),
else UTF-8 text, else hex; each cut at ``SHOW_BYTES_MAX`` with its full size
said.  The live tail sends at most ``FLUSHES_PER_S`` events a second with at
most ``SHOWN_PER_FLUSH`` records each; above that rate it keeps the newest,
and each event says how many arrived and how many it did not show.
"""

from __future__ import annotations

import collections
import contextlib
import json
from typing import TYPE_CHECKING, Any

import trio

from ..errors import InvalidArgumentError
from ..types import LSN_OLDEST, Gap, Record, compose_lsn, format_lsn, lsn_epoch, lsn_esn, parse_lsn

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..client import AsyncClient

SHOW_BYTES_MAX = 4096
PAGE_MAX = 1000
FLUSHES_PER_S = 10
SHOWN_PER_FLUSH = 200
#: A page of records is read for at most this long (a log whose copies are
#: out of reach answers with what came, and says it timed out).
PAGE_TIMEOUT_S = 5.0
PING_S = 5.0
#: The latest time a page may start at (a timestamp is a u64 of ms on the wire).
TIME_MS_MAX = 2**63 - 1


def show_bytes(value: bytes | None) -> dict[str, Any] | None:
    """A payload, key or header value as the page shows it."""
    if value is None:
        return None
    cut = value[:SHOW_BYTES_MAX]
    doc: dict[str, Any] = {"size": len(value), "truncated": len(value) > len(cut)}
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError:
        doc["hex"] = cut.hex()
        return doc
    doc["text"] = text
    if not doc["truncated"] and text[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            doc["json"] = json.loads(text)
    return doc


def record_doc(r: Record) -> dict[str, Any]:
    return {
        "lsn": r.lsn,
        "lsn_text": format_lsn(r.lsn),
        "timestamp": r.timestamp,
        "key": show_bytes(r.key),
        "payload": show_bytes(r.payload),
        "headers": [[name, show_bytes(value)] for name, value in r.headers],
        "create_time": r.create_time,
    }


def gap_doc(g: Gap) -> dict[str, Any]:
    return {
        "gap": g.type.name,
        "lo": g.lo,
        "hi": g.hi,
        "lo_text": format_lsn(g.lo),
        "hi_text": format_lsn(g.hi),
    }


async def start_lsn(client: AsyncClient, log_id: int, start: str, limit: int) -> int:
    """Where a page starts: ``oldest``, ``tail`` (the last ``limit`` records
    of the tail's epoch), ``time:MS`` (the first record at or after), or an
    LSN (``123``, ``e1n5``)."""
    if start == "oldest":
        return LSN_OLDEST
    if start == "tail":
        tail = await client.tail_lsn(log_id)
        return compose_lsn(lsn_epoch(tail), max(1, lsn_esn(tail) - limit + 1)) if tail else 1
    if start.startswith("time:"):
        ms = start.removeprefix("time:")
        if not ms.isascii() or not ms.isdigit() or int(ms) > TIME_MS_MAX:
            raise InvalidArgumentError(
                f"start: time must be milliseconds since the epoch (0 to 2^63-1), not {ms[:40]!r}"
            )
        return await client.find_time(log_id, int(ms))
    try:
        return max(LSN_OLDEST, parse_lsn(start))
    except ValueError:
        raise InvalidArgumentError(
            f"start must be oldest, tail, time:MS or an LSN, not {start!r}"
        ) from None


async def records_page(client: AsyncClient, log_id: int, start: str, limit: int) -> dict[str, Any]:
    """Up to ``limit`` records and gaps from ``start`` to the tail as it was
    when asked; ``next`` is where the following page starts."""
    if not 1 <= limit <= PAGE_MAX:
        raise InvalidArgumentError(f"limit must be between 1 and {PAGE_MAX}")
    first = await start_lsn(client, log_id, start, limit)
    tail = await client.tail_lsn(log_id)
    items: list[dict[str, Any]] = []
    at, timed_out = first, False
    if first <= tail:
        with trio.move_on_after(PAGE_TIMEOUT_S) as scope:
            async with client.read(log_id, first, until=tail) as stream:
                while len(items) < limit:
                    batch = await stream.next_objects(limit - len(items))
                    if not batch:
                        break
                    for item in batch:
                        if isinstance(item, Record):
                            items.append(record_doc(item))
                            at = item.lsn + 1
                        else:
                            items.append(gap_doc(item))
                            at = item.hi + 1
        timed_out = scope.cancelled_caught
    return {
        "log_id": log_id,
        "from": first,
        "from_text": format_lsn(first),
        "tail": tail,
        "tail_text": format_lsn(tail),
        "items": items,
        "next": at,
        "next_text": format_lsn(at),
        "at_tail": at > tail,
        "timed_out": timed_out,
    }


async def live_tail(
    client: AsyncClient, log_id: int, emit: Callable[[dict[str, Any]], Awaitable[None]]
) -> None:
    """Follow the log from past its tail and ``emit`` what arrives (see the
    module docstring), with a ping every ``PING_S`` when nothing does."""
    tail = await client.tail_lsn(log_id)
    await emit({"type": "start", "from": tail + 1, "from_text": format_lsn(tail + 1)})
    kept: collections.deque[Record | Gap] = collections.deque(maxlen=SHOWN_PER_FLUSH)
    arrived = 0

    async def read() -> None:
        nonlocal arrived
        async with client.read(log_id, tail + 1, until=None) as stream:
            while batch := await stream.next_objects():
                arrived += sum(1 for item in batch if isinstance(item, Record))
                kept.extend(batch[-SHOWN_PER_FLUSH:])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        last_sent = trio.current_time()
        while True:
            await trio.sleep(1 / FLUSHES_PER_S)
            now = trio.current_time()
            if kept:
                # Taken before the emit: the reader goes on meanwhile.
                shown, count = list(kept), arrived
                kept.clear()
                arrived, last_sent = 0, now
                records = [record_doc(x) for x in shown if isinstance(x, Record)]
                await emit(
                    {
                        "type": "records",
                        "records": records,
                        "gaps": [gap_doc(x) for x in shown if isinstance(x, Gap)],
                        "arrived": count,
                        "skipped": max(0, count - len(records)),
                    }
                )
            elif now - last_sent >= PING_S:
                await emit({"type": "ping"})
                last_sent = now

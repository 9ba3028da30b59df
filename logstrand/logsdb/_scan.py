"""Reading a log's stored batches out of its partitions, in LSN order, and
find-time.

Functions over a LogsDB's ``Partitions`` and engine; ``LogsDB`` checks its
arguments and calls them.  A stored batch is keyed by its first LSN, so the
batch holding ``start`` may begin before it: every scan first looks one key
back (seek-for-prev) in each partition.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from typing import TYPE_CHECKING

import attrs

from ..errors import CorruptionError, ProtocolError
from ..packed import LSNS, TIMESTAMPS, PackedBatch, last_lsn_of
from ..types import LSN_MAX, LSN_OLDEST
from . import _format as fmt

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ._engine import Engine
    from ._partitions import Partitions

_U64_MAX = 2**64 - 1
#: Records of batches passed over (``skip``) per scan, as a multiple of max_records.
SKIP_FACTOR = 8


@attrs.define
class PackedRead:
    """Stored batches overlapping [start, until], in LSN order.

    Batches may begin before ``start`` or end after ``until``: the reader of
    them takes only the LSNs it asked for.  ``scanned_to``: every LSN up to
    it was looked at; the next read goes on from ``scanned_to + 1``.
    """

    batches: list[PackedBatch] = attrs.Factory(list)
    scanned_to: int = 0
    records: int = 0
    bytes: int = 0


def batches(
    parts: Partitions, engine: Engine, log_id: int, start: int, until: int
) -> Iterator[tuple[int, PackedBatch]]:
    """(partition id, batch) of every stored batch overlapping [start, until],
    in LSN order, parsed and checked (header and body checksums).

    Raises:
        CorruptionError: a value is malformed or fails a checksum.
    """
    found = sorted(
        (e.first_lsn, e.last_lsn, pid)
        for pid, e in parts.dir.get(log_id, {}).items()
        if e.last_lsn >= start and e.first_lsn <= until
    )
    lo = fmt.data_key(log_id, start)
    hi = fmt.data_key(log_id, until + 1) if until < LSN_MAX else None
    if hi is None and log_id < _U64_MAX:
        hi = fmt.data_key(log_id + 1, 0)
    floor = fmt.data_key(log_id, 0)
    iters = []
    for _, _, pid in found:
        cf = parts.by_id(pid).cf
        items = engine.items(cf, lo, hi)
        first = next(items, None)
        head = [first] if first is not None else []
        # Batches never overlap: unless a batch starts at ``start`` (a read
        # that goes on where the last one ended), the one before may reach
        # it.  Passed over by its header alone when it does not.
        if first is None or first[0] != lo:
            prior = engine.last_before(cf, lo, floor)
            if prior is not None and last_lsn_of(prior[1]) >= start:
                head.insert(0, prior)
        iters.append(_tagged(pid, itertools.chain(head, items)))
    if any(a[1] >= b[0] for a, b in itertools.pairwise(found)):
        # Late or rebuilt records made partitions overlap in LSNs: merge.
        merged: Iterator[tuple[int, bytes, bytes]] = heapq.merge(*iters, key=lambda t: t[1])
    else:
        merged = itertools.chain(*iters)
    for pid, key, value in merged:
        pb = parse_value(log_id, key, value)
        if pb.last_lsn >= start:
            yield pid, pb


def _tagged(pid: int, items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[int, bytes, bytes]]:
    for k, v in items:
        yield pid, k, v


def parse_value(log_id: int, key: bytes, value: bytes) -> PackedBatch:
    """A stored value as a checked batch.

    Raises:
        CorruptionError: malformed, a checksum fails, or it disagrees with its key.
    """
    try:
        pb = PackedBatch.parse(value)
    except ProtocolError as exc:
        raise CorruptionError(f"log {log_id}: stored batch at {key.hex()}: {exc}") from None
    if pb.first_lsn != int.from_bytes(key[8:], "big"):
        raise CorruptionError(f"log {log_id}: stored batch disagrees with its key {key.hex()}")
    if not pb.body_ok():
        raise CorruptionError(
            f"log {log_id} lsn {pb.first_lsn:#x}..{pb.last_lsn:#x}: body checksum mismatch"
        )
    return pb


def scan(
    parts: Partitions,
    engine: Engine,
    log_id: int,
    start: int,
    until: int,
    max_records: int,
    max_bytes: int,
    skip: Callable[[tuple[int, ...]], bool] | None,
) -> PackedRead:
    """Stored batches of ``log_id`` overlapping [start, until] (see ``LogsDB.read_packed``)."""
    out = PackedRead(scanned_to=start - 1)
    if start > until:
        out.scanned_to = until
        return out
    skipped = 0
    for _, pb in batches(parts, engine, log_id, start, until):
        if pb.first_lsn > until:
            break
        if skip is not None and skip(pb.copyset):
            # Single-copy delivery: another node sends this batch.
            out.scanned_to = min(pb.last_lsn, until)
            skipped += pb.count
            if skipped >= SKIP_FACTOR * max_records:
                return out
            continue
        out.batches.append(pb)
        out.records += _in_range(pb, start, until)
        out.bytes += len(pb.data)
        out.scanned_to = min(pb.last_lsn, until)
        if out.records >= max_records or out.bytes >= max_bytes:
            return out
    out.scanned_to = until  # everything up to ``until`` was looked at
    return out


def _in_range(pb: PackedBatch, start: int, until: int) -> int:
    """How many records of ``pb`` lie in [start, until]."""
    if pb.first_lsn >= start and pb.last_lsn <= until:
        return pb.count
    if not pb.layout & LSNS:
        return min(pb.last_lsn, until) - max(pb.first_lsn, start) + 1
    lsns = pb.lsns()
    return bisect.bisect_right(lsns, until) - bisect.bisect_left(lsns, start)


def find_time(parts: Partitions, engine: Engine, log_id: int, ts_ms: int, trim: int) -> int:
    """The first LSN above ``trim`` with timestamp ≥ ``ts_ms`` (see ``LogsDB.find_time``)."""
    entries = sorted(
        (e.first_lsn, e.last_lsn, e.max_ts_ms, pid)
        for pid, e in parts.entries(log_id)
        if e.last_lsn > trim
    )
    for first, last, max_ts, _ in entries:
        if max_ts < ts_ms:
            continue
        for _, pb in batches(parts, engine, log_id, max(first, trim + 1), last):
            if not pb.layout & TIMESTAMPS and pb.timestamp_ms < ts_ms:
                continue  # one timestamp for the whole batch, too old
            for lsn, ts in zip(pb.lsns(), pb.timestamps(), strict=True):
                if lsn > trim and ts >= ts_ms:
                    return lsn
    top = max((e[1] for e in entries), default=0)
    return max(top, trim) + 1 if (top or trim) else LSN_OLDEST

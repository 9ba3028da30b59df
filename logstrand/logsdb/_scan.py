"""Reading a log's records out of its partitions: scans in LSN order that can
pass over runs of records a reader does not want, and find-time.

Functions over a LogsDB's ``Partitions`` and engine; ``LogsDB`` checks its
arguments and calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..types import LSN_OLDEST
from . import _format as fmt
from ._format import StoredBatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._engine import Engine
    from ._partitions import Partitions

#: A scan seeks past at most this many long skipped runs per call.
SEEKS_MAX = 64


def scan(
    parts: Partitions,
    engine: Engine,
    log_id: int,
    start: int,
    until: int,
    max_records: int,
    max_bytes: int,
    skip: Callable[[tuple[int, ...]], bool] | None,
) -> StoredBatch:
    """Records of ``log_id`` in [start, until] (see ``LogsDB.read_batch``)."""
    out = StoredBatch(log_id)
    out.scanned_to = start - 1
    if start > until:
        out.scanned_to = until
        return out
    for _ in range(SEEKS_MAX):
        for items in parts.sources(log_id, start, until):
            if fmt.decode_into(out, items, max_records, max_bytes, skip):
                break
        else:
            out.scanned_to = until  # everything up to ``until`` was looked at
            return out
        if out.skip_hint is None:
            return out
        identity, last = out.skip_hint
        out.skip_hint = None
        end = run_end(parts, engine, log_id, identity, last, until)
        out.scanned_to = max(out.scanned_to, end)
        if end >= until:
            out.scanned_to = until
            return out
        start = end + 1
    return out


def run_end(
    parts: Partitions, engine: Engine, log_id: int, identity: bytes, last: int, until: int
) -> int:
    """The last LSN of the STORE run ``last`` is in, found by point lookups.

    Records of one STORE are consecutive LSNs that share ``identity``
    (timestamp, wave, copyset): doubling steps, then bisection, over the
    partition that holds ``last``.  A miss only ends the run early (the
    caller then reads on record by record).
    """
    found = parts.holding(log_id, last)
    if found is None:
        return last
    cf = found[0].cf
    hi = min(until, found[1].last_lsn)

    def same(lsn: int) -> bool:
        value = engine.get(cf, fmt.data_key(log_id, lsn))
        return value is not None and fmt.store_identity(value) == identity

    inside, step = last, 256
    outside = hi + 1
    while inside + step <= hi:
        if not same(inside + step):
            outside = inside + step
            break
        inside += step
        step *= 2
    else:
        if inside < hi and same(hi):
            return hi
    while outside - inside > 1:
        mid = (inside + outside) // 2
        if same(mid):
            inside = mid
        else:
            outside = mid
    return inside


def find_time(parts: Partitions, engine: Engine, log_id: int, ts_ms: int, trim: int) -> int:
    """The first LSN above ``trim`` with timestamp ≥ ``ts_ms`` (see ``LogsDB.find_time``)."""
    entries = sorted(
        (e.first_lsn, e.last_lsn, e.max_ts_ms, pid)
        for pid, e in parts.entries(log_id)
        if e.last_lsn > trim
    )
    for first, last, max_ts, pid in entries:
        if max_ts < ts_ms:
            continue
        part = parts.by_id(pid)
        lo = max(first, trim + 1)
        for key, value in engine.items(
            part.cf, fmt.data_key(log_id, lo), fmt.data_key(log_id, last) + b"\x00"
        ):
            if fmt.value_timestamp(value) >= ts_ms:
                return int.from_bytes(key[8:], "big")
    top = max((e[1] for e in entries), default=0)
    return max(top, trim) + 1 if (top or trim) else LSN_OLDEST

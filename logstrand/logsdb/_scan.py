"""Reading a log's stored batches out of its partitions, in LSN order, and
find-time.

Functions over a LogsDB's ``Partitions`` and engine; ``LogsDB`` checks its
arguments and calls them.  A stored batch is keyed by its first LSN, so the
batch holding ``start`` may begin before it: every scan first looks one key
back (seek-for-prev) in each partition.

Copies that cannot be read are named, not skipped: a value that fails its
checksum covers its own LSNs, and a block RocksDB cannot read (its own
checksum failed, so its keys are unknown) covers everything from the last
good batch to the first key readable after it, found by seeking forward
(doubling steps, then halving).  Read streams report such ranges to readers
(``Unreadable``); every other caller gets ``CorruptionError``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from typing import TYPE_CHECKING

import attrs

from ..batch import LSNS, TIMESTAMPS, PackedBatch, last_lsn_of
from ..errors import CorruptionError, ProtocolError, UnreadableError
from ..types import LSN_MAX, LSN_OLDEST
from . import _format as fmt

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ._engine import Engine
    from ._partitions import Partitions

_U64_MAX = 2**64 - 1
#: Records of batches passed over (``skip``) per scan, as a multiple of
#: max_records; and bytes of them, at most ``max_bytes``.  A scan that
#: returns nothing still reports how far it looked (one small message), so
#: the bound trades messages for the latency of the first records: bound by
#: records alone, a node that sent none of the first batches of a range of
#: 10 KiB records read 160 MB (16,384 records) before it answered, and a
#: reader of 200 MB waited 460 ms for its first batch.
SKIP_FACTOR = 8


@attrs.frozen
class Unreadable:
    """LSNs [first_lsn, last_lsn] of a log whose copies here, if any, cannot
    be read: they fail a checksum (``why`` says which)."""

    first_lsn: int
    last_lsn: int
    why: str


@attrs.define
class PackedRead:
    """Stored batches overlapping [start, until], in LSN order.

    Batches may begin before ``start`` or end after ``until``: the reader of
    them takes only the LSNs it asked for.  ``scanned_to``: every LSN up to
    it was looked at; the next read goes on from ``scanned_to + 1``.
    ``unreadable``: ranges within [start, scanned_to] whose copies could not
    be read (only when the scan was asked to tolerate them).
    """

    batches: list[PackedBatch] = attrs.Factory(list)
    scanned_to: int = 0
    records: int = 0
    bytes: int = 0
    unreadable: list[Unreadable] = attrs.Factory(list)


def batches(
    parts: Partitions,
    engine: Engine,
    log_id: int,
    start: int,
    until: int,
    *,
    tolerant: bool = False,
) -> Iterator[tuple[int, PackedBatch | Unreadable]]:
    """(partition id, batch) of every stored batch overlapping [start, until],
    in LSN order, parsed and checked (header and body checksums).  With
    ``tolerant``, copies that cannot be read come as ``Unreadable`` ranges
    (clipped to [start, until], disjoint from the batches around them).

    Raises:
        CorruptionError: without ``tolerant``, a copy cannot be read.
    """
    found = sorted(
        (e.first_lsn, e.last_lsn, pid)
        for pid, e in parts.dir.get(log_id, {}).items()
        if e.last_lsn >= start and e.first_lsn <= until
    )
    iters = [
        _partition(engine, pid, parts.by_id(pid).cf, log_id, start, until) for _, _, pid in found
    ]
    if any(a[1] >= b[0] for a, b in itertools.pairwise(found)):
        # Late or rebuilt records made partitions overlap in LSNs: merge.
        merged: Iterator[tuple[int, bytes, bytes | Unreadable]] = heapq.merge(
            *iters, key=lambda t: t[1]
        )
    else:
        merged = itertools.chain(*iters)
    covered = start - 1  # every LSN up to here was yielded
    bad: Unreadable | None = None  # a value whose header fails: its end is unknown
    for pid, key, value in merged:
        if isinstance(value, Unreadable):
            got: PackedBatch | Unreadable = value
        else:
            try:
                got = parse_value(log_id, key, value)
            except CorruptionError as exc:
                if not tolerant:
                    raise
                first = int.from_bytes(key[8:], "big")
                got = _checked_span(value, first, until, str(exc))
        lo = got.first_lsn
        if bad is not None:
            if lo > max(covered, bad.first_lsn - 1) + 1:
                yield pid, Unreadable(max(covered + 1, bad.first_lsn), lo - 1, bad.why)
                covered = lo - 1
            bad = None
        if isinstance(got, Unreadable):
            if not tolerant:
                raise CorruptionError(f"log {log_id}: {got.why}")
            if got.last_lsn == LSN_MAX:  # a value with an unreadable header
                bad = got
                continue
            if got.last_lsn > covered:
                clip = Unreadable(max(lo, covered + 1), min(got.last_lsn, until), got.why)
                yield pid, clip
                covered = clip.last_lsn
        elif got.last_lsn >= start:
            yield pid, got
            covered = max(covered, got.last_lsn)
    if bad is not None and covered < until:
        yield -1, Unreadable(max(covered + 1, bad.first_lsn), until, bad.why)


def stored(
    parts: Partitions, engine: Engine, log_id: int, start: int, until: int
) -> Iterator[tuple[int, PackedBatch]]:
    """``batches`` for callers that need every copy readable.

    Raises:
        CorruptionError: a copy cannot be read.
    """
    for pid, got in batches(parts, engine, log_id, start, until):
        assert isinstance(got, PackedBatch)  # not tolerant: unreadable copies raise
        yield pid, got


def _checked_span(value: bytes, first: int, until: int, why: str) -> Unreadable:
    """The LSNs a value that fails a check covers: its own when its header
    is sound (the header has its own checksum), else unknown (``LSN_MAX``)."""
    try:
        pb = PackedBatch.parse(value)
    except ProtocolError:
        return Unreadable(first, LSN_MAX, why)
    return Unreadable(first, min(pb.last_lsn, until), why)


def _partition(
    engine: Engine, pid: int, cf: str, log_id: int, start: int, until: int
) -> Iterator[tuple[int, bytes, bytes | Unreadable]]:
    """One partition's values overlapping [start, until] in key order, and an
    ``Unreadable`` (keyed by its first LSN) for each stretch that cannot be read."""
    lo = fmt.data_key(log_id, start)
    hi = fmt.data_key(log_id, until + 1) if until < LSN_MAX else None
    if hi is None and log_id < _U64_MAX:
        hi = fmt.data_key(log_id + 1, 0)
    pos, after = lo, start  # read on from ``pos``; ``after``: its LSN
    look_back = True
    while True:
        try:
            items = engine.items(cf, pos, hi)
            head: list[tuple[bytes, bytes]] = []
            if look_back:
                look_back = False
                first = next(items, None)
                head = [first] if first is not None else []
                # Batches never overlap: unless a batch starts at ``start`` (a
                # read that goes on where the last one ended), the one before
                # may reach it.  Passed over by its header alone when it does not.
                if first is None or first[0] != lo:
                    prior = engine.last_before(cf, lo, fmt.data_key(log_id, 0))
                    if prior is not None and last_lsn_of(prior[1]) >= start:
                        head.insert(0, prior)
            for k, v in itertools.chain(head, items):
                yield pid, k, v
                after = int.from_bytes(k[8:], "big") + 1
            return
        except UnreadableError as exc:
            resume = _first_readable(engine, cf, log_id, after, until, hi)
            last = until if resume is None else resume - 1
            if last >= after:
                yield pid, fmt.data_key(log_id, after), Unreadable(after, last, str(exc))
            if resume is None:
                return
            pos, after = fmt.data_key(log_id, resume), resume


def _first_readable(
    engine: Engine, cf: str, log_id: int, bad: int, until: int, hi: bytes | None
) -> int | None:
    """The LSN of the first key after an unreadable block that holds LSN
    ``bad`` (None: nothing readable up to ``until``): seeks in doubling steps
    until one succeeds, then halves the step back to the first that does."""

    def seek(lsn: int) -> int | None:  # the first key at or after lsn; raises if unreadable
        key = engine.first_key(cf, fmt.data_key(log_id, lsn), hi)
        return None if key is None else int.from_bytes(key[8:], "big")

    failed, step = bad, 1
    while True:
        probe = min(failed + step, until)
        if probe <= failed:
            return None  # unreadable up to ``until``
        try:
            found = seek(probe)
            break
        except UnreadableError:
            failed, step = probe, step * 2
    ok = probe
    while ok - failed > 1:  # seek(failed) raises, seek(ok) does not
        mid = (failed + ok) // 2
        try:
            found = seek(mid)
            ok = mid
        except UnreadableError:
            failed = mid
    return found


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
    tolerant: bool = False,
) -> PackedRead:
    """Stored batches of ``log_id`` overlapping [start, until] (see ``LogsDB.read_packed``)."""
    out = PackedRead(scanned_to=start - 1)
    if start > until:
        out.scanned_to = until
        return out
    skipped = skipped_bytes = 0
    for _, pb in batches(parts, engine, log_id, start, until, tolerant=tolerant):
        if pb.first_lsn > until:
            break
        if isinstance(pb, Unreadable):
            out.unreadable.append(pb)
            out.scanned_to = pb.last_lsn
            continue
        if skip is not None and skip(pb.copyset):
            # Single-copy delivery: another node sends this batch.
            out.scanned_to = min(pb.last_lsn, until)
            skipped += pb.count
            skipped_bytes += len(pb.data)
            if skipped >= SKIP_FACTOR * max_records or skipped_bytes >= max_bytes:
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
        for _, pb in stored(parts, engine, log_id, max(first, trim + 1), last):
            if not pb.layout & TIMESTAMPS and pb.timestamp_ms < ts_ms:
                continue  # one timestamp for the whole batch, too old
            for lsn, ts in zip(pb.lsns(), pb.timestamps(), strict=True):
                if lsn > trim and ts >= ts_ms:
                    return lsn
    top = max((e[1] for e in entries), default=0)
    return max(top, trim) + 1 if (top or trim) else LSN_OLDEST

"""The offload's procedures for one log (``_steps``): upload its old
records, forget what a trim left behind, delete its orphan objects.  The
rules are ``_offload``'s module docstring; ``_offload.Offload`` drives
these with trio, and the simulation drives them over an object store that
fails, is slow, and loses objects, with nodes killed between any two steps
(``tests/sim/tiering.py``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from ..types import SegmentField as F
from ._format import Batch, Entry, GapEntry, build
from ._objects import ObjectStoreError
from ._steps import FindTime, NextItems, ObjectCall, OpenRead, Procedure, StoreCall

if TYPE_CHECKING:
    from collections.abc import Callable

_log = logging.getLogger("logstrand.tier")


@attrs.define
class OffloadStats:
    """What the offload did, for metrics and tests."""

    objects: int = 0
    bytes: int = 0
    records: int = 0
    lost_races: int = 0
    failures: int = 0
    deleted: int = 0
    orphans: int = 0


@attrs.frozen
class Uploader:
    """Who uploads, and how: the node (its id goes in each object's key,
    with a random ``token()`` so that two uploads of a range never share
    one), the size objects grow to, and where the figures go."""

    node_id: int
    object_bytes: int
    token: Callable[[], str]
    stats: OffloadStats


def offload(up: Uploader, log: int, cutoff_ms: int, tail: int) -> Procedure:
    """Upload the log's records past its tiered point, older than
    ``cutoff_ms`` and at or below ``tail``."""
    point, _ = yield StoreCall(lambda s: s.tier_state(log))
    trim = yield StoreCall(lambda s: s.trim_point(log))
    start = max(point, trim) + 1
    if start > tail:
        return
    boundary = min((yield FindTime(log, cutoff_ms)) - 1, tail)
    if boundary < start:
        return
    expect = point
    entries: list[Entry] = []
    size = records = 0
    # The last run of records read: timestamps never go back in a log, so
    # its newest is the object's.  Only that run's timestamps are decoded,
    # once an object is full, not every run's.
    last_run: Any = None
    yield OpenRead(log, start, boundary)
    while items := (yield NextItems()):
        for item in items:
            entry, n = entry_of(item)
            entries.append(entry)
            records += n
            if n:
                last_run = item
            size += len(entry.data) if isinstance(entry, Batch) else 16
            if size < up.object_bytes:
                continue
            won = yield from upload(up, log, expect, entries, records, _newest(last_run))
            if won is None:
                return
            expect = won
            entries, size, records = [], 0, 0
    if entries:
        yield from upload(up, log, expect, entries, records, _newest(last_run))


def _newest(run: Any) -> int | None:
    return None if run is None else max(run.timestamps_ms)


def upload(
    up: Uploader,
    log: int,
    expect: int,
    entries: list[Entry],
    records: int,
    last_ts: int | None = None,
) -> Procedure:
    """Put one object and record it; the new tiered point, or None when
    another upload of the range won.  The order is the promise: an object
    is recorded only once it is in the store whole (its size read back).
    ``last_ts``: the newest timestamp of its records (of the last records
    read, if it holds none), for ``find_time``."""
    built = build(entries, records)
    key = f"logs/{log}/{built.lo:016x}-{built.hi:016x}-n{up.node_id}-{up.token()}"
    yield ObjectCall("put", (key, built.data))
    size = yield ObjectCall("size", (key,))
    if size != len(built.data):
        yield ObjectCall("delete", (key,))
        raise ObjectStoreError(f"{key}: {size} bytes stored of {len(built.data)}")
    lo, hi, crc = built.lo, built.hi, built.crc
    won = yield StoreCall(
        lambda s: s.record_tier_segment(log, expect, lo, hi, key, size, crc, records, last_ts)
    )
    stats = up.stats
    if not won:
        stats.lost_races += 1
        yield ObjectCall("delete", (key,))
        return None
    stats.objects += 1
    stats.bytes += size
    stats.records += records
    _log.info(
        "tier: log %d: LSNs %d..%d in %s (%d records, %d bytes)",
        log, built.lo, built.hi, key, records, size,
    )  # fmt: skip
    return built.hi


def drop_trimmed(stats: OffloadStats, log: int) -> Procedure:
    """Forget the segments a trim left behind, and delete their objects."""
    trim = yield StoreCall(lambda s: s.trim_point(log))
    if not trim:
        return
    gone = yield StoreCall(lambda s: s.drop_tier_segments(log, trim))
    for key in gone:
        yield ObjectCall("delete", (key,))
        stats.deleted += 1


def sweep_log(stats: OffloadStats, log: int, older_than_s: float) -> Procedure:
    """Delete the log's objects that no segment names and that were
    written before ``older_than_s`` (seconds since the epoch): an upload in
    flight is younger."""
    _, segments = yield StoreCall(lambda s: s.tier_state(log))
    named = {str(seg[F.KEY]) for seg in segments}
    listed = yield ObjectCall("listing", (f"logs/{log}/",))
    for name, written in listed:
        if name in named or written > older_than_s:
            continue
        # Recorded since the listing?  The record is read again first:
        # deleting a named object would lose its records.
        _, segments = yield StoreCall(lambda s: s.tier_state(log))
        if any(str(seg[F.KEY]) == name for seg in segments):
            continue
        yield ObjectCall("delete", (name,))
        stats.orphans += 1
        _log.warning("tier: log %d: deleted %s, an object no segment names", log, name)


def entry_of(item: Any) -> tuple[Entry, int]:
    """A reader's item as an object's entry, and how many records it holds."""
    view = getattr(item, "view", None)
    if view is None:  # a GapItem (by shape: the client is not imported here)
        return GapEntry(item.type, item.lo, item.hi), 0
    lsns = item.lsns
    return Batch(view.packed.data, lsns[0], lsns[-1]), len(lsns)

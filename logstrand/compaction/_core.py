"""The cleaner's decisions (pure: no trio, no sockets, no RocksDB).

A pass over a compacted log, as the sequencer's node runs it:

1. The *dirty section* is ``(clean_point, end]``: released records (the reader
   only sees those) up to the first one younger than ``min_compaction_lag``.
2. Reading it once, the cleaner records every key's latest LSN in the offset
   map; a map that fills up ends the section early (``end`` = the last record
   whose key fit), and the next pass goes on from there.
3. Every node holding copies of the log gets the map, ``end``, the old clean
   point and the tombstone horizon, and drops, among its copies at or below
   ``end``, exactly what ``drops`` says.  Nothing above ``end`` is touched, so
   no record younger than the lag, and no unreleased record, is ever removed.
4. When every node has done so, ``end`` becomes the clean point.

``drops`` never removes the latest record of a key (the one the map points
to), except a tombstone that an earlier pass already kept (it lies at or
below the old clean point) and that is older than ``delete_retention``.
Records without a key (written before the log became compacted) stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import numpy as np

from ._offset_map import OffsetMap, hash_keys

if TYPE_CHECKING:
    from collections.abc import Sequence


def drops(
    lsns: Sequence[int],
    timestamps_ms: Sequence[int],
    keys: Sequence[bytes | None],
    tombstone: Sequence[bool],
    offsets: OffsetMap,
    *,
    end: int,
    old_clean_point: int,
    tombstone_horizon_ms: int,
) -> list[int]:
    """Indices of the copies to remove, among one batch of a node's copies."""
    n = len(lsns)
    if not n:
        return []
    lsn = np.array(lsns, dtype=np.uint64)
    keyed = np.fromiter((k is not None for k in keys), dtype=bool, count=n)
    in_range = keyed & (lsn <= np.uint64(end))
    idx = np.flatnonzero(in_range)
    if not idx.size:
        return []
    keyed_keys: list[bytes] = [keys[i] for i in idx.tolist()]  # type: ignore[misc]
    latest = offsets.get_many(hash_keys(keyed_keys))
    mine = lsn[idx]
    superseded = latest > mine
    tomb = np.array([tombstone[i] for i in idx.tolist()], dtype=bool)
    ts = np.array([timestamps_ms[i] for i in idx.tolist()], dtype=np.int64)
    expired = (
        tomb
        & (latest <= mine)
        & (mine <= np.uint64(old_clean_point))
        & (ts <= tombstone_horizon_ms)
    )
    out: list[int] = idx[superseded | expired].tolist()
    return out


@attrs.frozen
class Candidate:
    """What the cleaner knows of one compacted log when choosing."""

    log_id: int
    total_bytes: int
    clean_bytes: int
    min_cleanable_ratio: float
    #: The oldest dirty record's timestamp (None: nothing dirty, or unknown).
    oldest_dirty_ms: int | None = None
    max_compaction_lag_ms: int | None = None

    @property
    def dirty_ratio(self) -> float:
        if self.total_bytes <= 0:
            return 0.0
        dirty = max(0, self.total_bytes - self.clean_bytes)
        return min(1.0, dirty / self.total_bytes)

    def overdue(self, now_ms: int) -> bool:
        return (
            self.max_compaction_lag_ms is not None
            and self.oldest_dirty_ms is not None
            and self.oldest_dirty_ms < now_ms - self.max_compaction_lag_ms
        )

    def eligible(self, now_ms: int) -> bool:
        # Strictly above the ratio, as Kafka: a ratio of 1.0 never fires by itself.
        if self.total_bytes <= self.clean_bytes:
            return False
        return self.dirty_ratio > self.min_cleanable_ratio or self.overdue(now_ms)


def choose(candidates: Sequence[Candidate], now_ms: int) -> Candidate | None:
    """The log to clean next: the dirtiest eligible one (overdue ones first)."""
    ready = order(candidates, now_ms)
    return ready[0] if ready else None


def order(candidates: Sequence[Candidate], now_ms: int) -> list[Candidate]:
    """Every eligible log, in the order a round cleans them: overdue ones
    first, then the dirtiest (Kafka's filthiest-first)."""
    ready = [c for c in candidates if c.eligible(now_ms)]
    return sorted(ready, key=lambda c: (c.overdue(now_ms), c.dirty_ratio), reverse=True)


@attrs.frozen
class PassStats:
    """What one pass did (``client.compact`` returns it)."""

    log_id: int
    clean_point_before: int
    clean_point: int
    records_read: int
    bytes_read: int
    keys: int
    map_bytes: int
    map_fill: float
    partial: bool
    records_removed: int
    bytes_removed: int
    clean_bytes: int
    nodes: int
    seconds: float
    #: DropCopies messages the map went to each node in (``drop_entries_max``).
    parts: int = 1

    def to_json(self) -> dict[str, int | float | bool]:
        return attrs.asdict(self)

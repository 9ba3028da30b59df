"""Columnar results of the client: what a read delivers as columns, and what
the nodes' partition directories say of a log.  Pure (no trio)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..types import Gap
from ._reader_core import RecordRun

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._reader_core import Item


@attrs.frozen
class ColumnBatch:
    """Records as columns (one entry per record, in LSN order) and the gaps met
    since the previous batch.  ``payloads[i] is None`` marks a tombstone."""

    log_id: int
    lsns: list[int]
    timestamps_ms: list[int]
    keys: list[bytes | None]
    payloads: list[bytes | None]
    gaps: list[Gap]

    def __len__(self) -> int:
        return len(self.lsns)

    @classmethod
    def of(cls, log_id: int, items: Iterable[Item]) -> ColumnBatch:
        """Join the reader's delivered items into one batch."""
        lsns: list[int] = []
        ts: list[int] = []
        keys: list[bytes | None] = []
        payloads: list[bytes | None] = []
        gaps: list[Gap] = []
        for item in items:
            if isinstance(item, RecordRun):
                lsns += item.lsns
                ts += item.timestamps_ms
                keys += item.keys
                payloads += item.payloads
            else:
                gaps.append(Gap(item.type, item.lo, item.hi))
        return cls(log_id, lsns, ts, keys, payloads, gaps)


@attrs.frozen
class LogSegment:
    """What one partition of one node holds of a log (above its trim point):
    an LSN range, its timestamps, and the bytes and records of the copies."""

    node_id: int
    first_lsn: int
    last_lsn: int
    min_ts_ms: int
    max_ts_ms: int
    bytes: int
    records: int

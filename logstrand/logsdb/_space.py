"""A base of ``LogsDB``: what frees space.  Retention by time and by size
moves trim points; a tiered log's local retention moves its local floor
(its records at or below it are in the object store); partitions whose
records are all below one or the other are dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._partitions import Partitions


class SpaceKeeping:
    """A base of ``LogsDB``: these move its trim points and local floors,
    and drop its partitions."""

    _parts: Partitions
    _meta: dict[str, dict[int, int]]
    _clock_ms: Callable[[], int]

    def _check_open(self) -> None:
        raise NotImplementedError

    def trim(self, log_id: int, lsn: int, *, sync: bool = True) -> int:
        raise NotImplementedError

    def set_local_floor(self, log_id: int, lsn: int, *, sync: bool = True) -> int:
        raise NotImplementedError

    def low_point(self, log_id: int) -> int:
        raise NotImplementedError

    def apply_retention(
        self,
        retention_ms: Mapping[int, int],
        *,
        now_ms: int | None = None,
        retention_bytes: Mapping[int, int] | None = None,
    ) -> dict[int, int]:
        """Trim each log's records older than its retention, then its oldest
        records while its copies here take more than its ``retention_bytes``
        (``Partitions.retention_targets``).  Returns the logs whose trim point
        moved, with the new trim point."""
        self._check_open()
        now = self._clock_ms() if now_ms is None else now_ms
        trims = self._meta["trim"]
        targets = self._parts.retention_targets(retention_ms, now, retention_bytes or {}, trims)
        return {log: self.trim(log, lsn) for log, lsn in targets.items()}

    def apply_local_retention(
        self,
        retention_ms: Mapping[int, int],
        retention_bytes: Mapping[int, int],
        tiered: Mapping[int, int],
        *,
        now_ms: int | None = None,
    ) -> dict[int, int]:
        """Raise the local floors of tiered logs as their local retention
        allows, never past their tiered point (``tiered``: log -> the LSN
        every record at or below which is in an object).  The same targets
        as ``apply_retention``'s; returns the logs whose floor moved."""
        self._check_open()
        now = self._clock_ms() if now_ms is None else now_ms
        lows = {log: self.low_point(log) for log in tiered}
        targets = self._parts.retention_targets(retention_ms, now, retention_bytes, lows)
        out = {}
        for log, target in targets.items():
            floor = min(target, tiered.get(log, 0))
            if floor > lows[log]:
                out[log] = self.set_local_floor(log, floor)
        return out

    def drop_partitions(self) -> list[int]:
        """Drop every partition (but the newest) whose records are all trimmed
        (or at or below their log's local floor).

        Returns the ids of the dropped partitions.
        """
        self._check_open()
        lows = dict(self._meta["trim"])
        for log, floor in self._meta["floor"].items():  # only tiered logs have one
            lows[log] = max(lows.get(log, 0), floor)
        return self._parts.drop_trimmed(lows)

"""The epoch store's record of tiered storage: for each log, the objects
that hold its old records (``tier/{log}``), and a feed of the logs whose
record changed (``tier-feed``), as the trim feed does for trim points.

A log's document is its **tiered point** (every record at or below it is in
an object; 0: none) and its **segments**, each ``[first, last, key, bytes,
crc32c, records]`` in LSN order, the first of each one past the last of
the one before.  A segment is recorded only after its object is uploaded
and read back whole (``tier``'s offload), so a recorded segment always
names a complete object; a node killed mid-upload records nothing.
Recording is a compare-and-set on the tiered point: two nodes that
uploaded the same range (their views of who uploads differed for a
moment) record it once, and the one that loses deletes its object.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..records import check_log_id
from ..types import SegmentField
from ._log_docs import feed_append, feed_since

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

#: The epoch-store document of the tier feed (``tiers_changed``).
TIER_FEED = "tier-feed"
TIER_FEED_MAX = 256


class TierDocs:
    """Mixed into ``EpochStore``: needs its ``_doc``, ``_update`` and ``_get_many``."""

    _doc: Callable[[str], Any]
    _update: Callable[[str, Callable[[Any], Any]], Any]
    _get_many: Callable[[list[str]], dict[str, bytes]]

    def tier_state(self, log_id: int) -> tuple[int, list[list[Any]]]:
        """The log's tiered point and segments (0 and none: nothing tiered)."""
        check_log_id(log_id, internal=True)
        return _state(self._doc(f"tier/{log_id}"))

    def tier_points(self, log_ids: Iterable[int]) -> dict[int, int]:
        """The tiered point of many logs at once (0: nothing tiered)."""
        logs = list(log_ids)
        docs = self._get_many([f"tier/{log}" for log in logs])
        out = {}
        for log in logs:
            raw = docs.get(f"tier/{log}")
            out[log] = 0 if raw is None else _state(json.loads(raw))[0]
        return out

    def record_tier_segment(
        self,
        log_id: int,
        expect: int,
        first: int,
        last: int,
        key: str,
        size: int,
        crc: int,
        records: int,
        last_ts_ms: int | None = None,
    ) -> bool:
        """Record that the object ``key`` holds the log's LSNs ``first`` to
        ``last``, read from past the tiered point ``expect`` (``first`` is
        past it by more where the log was trimmed beyond it); True if it is
        recorded now (or was, the same), False if the tiered point is no
        longer ``expect`` (another upload of the range won).  ``last_ts_ms``:
        the newest timestamp of its records, if known."""
        check_log_id(log_id, internal=True)
        if not expect < first <= last:
            raise ValueError(f"a segment of LSNs {first}..{last} past {expect}")
        segment: list[Any] = [first, last, key, size, crc, records]
        if last_ts_ms is not None:
            segment.append(last_ts_ms)
        won = False

        def change(doc: Any) -> Any:
            nonlocal won
            point, segments = _state(doc)
            won = segment in segments
            if point == expect and not won:
                segments = [*segments, segment]
                point, won = last, True
            return {"point": point, "segments": segments}

        self._update(f"tier/{log_id}", change)
        if won:
            self._feed(log_id)
        return won

    def drop_tier_segments(self, log_id: int, through: int) -> list[str]:
        """Forget the segments wholly at or below ``through`` (the log was
        trimmed there); returns their keys, for their objects to be
        deleted.  The tiered point stays: what was tiered stays tiered."""
        check_log_id(log_id, internal=True)
        gone: list[str] = []

        def change(doc: Any) -> Any:
            point, segments = _state(doc)
            gone[:] = [s[SegmentField.KEY] for s in segments if s[SegmentField.LAST] <= through]
            kept = [s for s in segments if s[SegmentField.LAST] > through]
            return {"point": point, "segments": kept}

        self._update(f"tier/{log_id}", change)
        if gone:
            self._feed(log_id)
        return gone

    def _feed(self, log_id: int) -> None:
        self._update(TIER_FEED, lambda doc: feed_append(doc, log_id, TIER_FEED_MAX))

    def tiers_changed(self, since: int) -> tuple[int, list[int] | None]:
        """The tier feed: (its sequence number, the logs whose record changed
        after ``since``), or None for the logs when the feed does not reach
        back that far (-1: never read), as ``trims_changed``."""
        return feed_since(self._doc(TIER_FEED), since)


def _state(doc: Any) -> tuple[int, list[list[Any]]]:
    if doc is None:
        return 0, []
    return int(doc["point"]), [list(s) for s in doc["segments"]]

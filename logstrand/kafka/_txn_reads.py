"""read_committed Fetch: each log's transactions, tracked by a read stream
of the front's own (``transactions.TxnIndex`` fed by it).

A Kafka broker knows its partitions' open transactions because it leads
them; a front knows nothing it did not read.  So for a log that a
read_committed consumer fetches, the front follows the log from the first
LSN fetched with a stream of its own, which feeds the log's ``TxnIndex``:
its last stable LSN (Kafka's LSO: a read_committed Fetch answers records
below it only) and its aborted transactions (the Fetch's
``aborted_transactions``, by which the consumer drops an aborted producer's
records up to its ABORT marker).

A fetch below where the index is whole starts the log's tracking again from
there.  At most ``TRACKED_MAX`` logs are tracked; the one fetched least
recently stops for a new one, and one not fetched for ``IDLE_S`` stops when
another starts.  A fetch waits (at most ``CATCH_UP_S``) for the index to
have read up to the tail it answers with, so that a consumer is not told an
LSO below records that are stable already.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from ..client import GapItem
from ..client._committed_view import feed_index
from ..errors import LogstrandError
from ..transactions import TxnIndex

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._offsets import OffsetMap

_log = logging.getLogger("logstrand.kafka")

#: Logs whose transactions a front tracks at once, at most.
TRACKED_MAX = 256
#: A log not fetched read_committed for this long stops being tracked (when
#: another log starts).
IDLE_S = 120.0
#: How long a fetch waits for the index to catch up with the tail, at most.
CATCH_UP_S = 1.0


@attrs.define(eq=False)
class _Tracker:
    index: TxnIndex
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    changed: trio.Event = attrs.Factory(trio.Event)
    used: float = 0.0
    dead: bool = False

    def tell(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


@attrs.frozen
class Committed:
    """What a read_committed Fetch of a partition answers with: the last
    stable offset, the last LSN it may read, the aborted transactions."""

    last_stable_offset: int
    until_lsn: int
    aborted: list[dict[str, int]]


class TxnReads:
    """The front's tracking of logs' transactions (see the module docstring)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        #: Log -> its tracking (the metrics read it too).
        self.trackers: dict[int, _Tracker] = {}

    async def committed(
        self, log_id: int, m: OffsetMap, offset: int, end: int, tail: int
    ) -> Committed:
        """The read_committed view of a fetch of ``log_id`` at ``offset``
        (``end``: the high watermark, from ``tail``)."""
        first = m.lsn_at(offset) if offset < end else tail + 1
        tracker = self._tracker(log_id, first)
        with trio.move_on_after(CATCH_UP_S):
            while tracker.index.scanned < tail and not tracker.dead:
                await tracker.changed.wait()
        index = tracker.index
        stable = min(index.last_stable(), tail + 1)
        lso = min(end, max(offset, m.next_offset(stable - 1)))
        aborted = [
            {"producer_id": a.producer_id, "first_offset": m.offset(max(a.first_lsn, first))}
            for a in index.aborted_between(first, stable - 1)
        ]
        return Committed(lso, stable - 1, aborted)

    async def changed(self, log_id: int) -> None:
        """Wait until the log's index reads more (a long poll at the LSO)."""
        tracker = self.trackers.get(log_id)
        if tracker is None or tracker.dead:
            await trio.sleep_forever()
        else:
            await tracker.changed.wait()

    def _tracker(self, log_id: int, first: int) -> _Tracker:
        now = trio.current_time()
        tracker = self.trackers.get(log_id)
        if tracker is not None and not tracker.dead and tracker.index.kept_from <= first:
            tracker.used = now
            return tracker
        if tracker is not None:
            self._stop(log_id)
        # Room for one more: those idle go, then the least recently used.
        for other, t in list(self.trackers.items()):
            if now - t.used > IDLE_S:
                self._stop(other)
        if len(self.trackers) >= TRACKED_MAX:
            self._stop(min(self.trackers, key=lambda k: self.trackers[k].used))
        tracker = self.trackers[log_id] = _Tracker(TxnIndex(first), used=now)
        self.client.nursery.start_soon(self._follow, log_id, tracker)
        return tracker

    def _stop(self, log_id: int) -> None:
        tracker = self.trackers.pop(log_id)
        tracker.scope.cancel()

    async def _follow(self, log_id: int, tracker: _Tracker) -> None:
        index = tracker.index
        with tracker.scope:
            try:
                async with self.client.read(log_id, index.kept_from, None) as stream:
                    async for items in stream.batches():
                        for item in items:
                            if isinstance(item, GapItem):
                                index.advance(item.hi)
                            else:
                                feed_index(index, item)
                        tracker.tell()
            except LogstrandError as exc:
                _log.warning("kafka: log %d: transactions not tracked: %s", log_id, exc)
            finally:
                tracker.dead = True
                tracker.tell()
                if self.trackers.get(log_id) is tracker:
                    del self.trackers[log_id]

"""The sequencer host's timer queue (rule 7 of ``_host``): logs waiting for
a deadline, in a heap, each with one live entry.  Pure: no trio."""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._core import SequencerCore


class DeadlineQueue:
    """Logs parked until a deadline.  Parking a log again moves its deadline;
    the entry it had goes stale and is skipped (and the heap is rebuilt when
    stale entries outnumber live ones four to one, so it stays bounded)."""

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._live)

    def park(self, log_id: int, deadline: float) -> None:
        live = self._live
        if live.get(log_id) == deadline:
            return
        live[log_id] = deadline
        heapq.heappush(self._heap, (deadline, log_id))
        if len(self._heap) > 4 * len(live) + 1024:
            self._heap = [(d, log) for log, d in live.items()]
            heapq.heapify(self._heap)

    def forget(self, log_id: int) -> None:
        """The log is being looked at anyway: its entry is stale."""
        self._live.pop(log_id, None)

    def next_deadline(self) -> float:
        """The first deadline (perhaps of a stale entry: early, never late);
        inf when none."""
        return self._heap[0][0] if self._heap else math.inf

    def due(self, now: float) -> list[int]:
        """The logs whose deadline has come (taken out of the queue)."""
        heap, live = self._heap, self._live
        out: list[int] = []
        while heap and heap[0][0] <= now:
            deadline, log_id = heapq.heappop(heap)
            if live.get(log_id) == deadline:
                del live[log_id]
                out.append(log_id)
        return out


def parkable(core: SequencerCore, busy: bool) -> float | None:
    """Rule 7: the deadline of a wave in flight, when nothing else of the log
    changes with time alone (else None).  ``busy``: an activation runs or
    appends wait for one."""
    if busy or core.exhausted or not core.recovered or core.preempted:
        return None
    if core.released_lsn < core.last_known_good_lsn:
        return None
    return core.next_deadline()

"""Copies a node stored that stay unreleased: a sign that the log's sequencer
died or stalls.  Pure: no trio.

Theory of operation
-------------------
Records become readable only when their sequencer releases them.  When the
sequencer's node dies, whatever it acknowledged but had not released yet
waits for the next sequencer of the log, and nothing starts one on a quiet
log: no append comes, and a reader that is already tailing asks nobody.

So every storage node watches its own copies.  A copy stored above the
node's release pointer that is still above it ``after_s`` later means the
release is overdue; the node then asks the log's owner for its sequencer's
state (GET_SEQ_STATE), which activates a sequencer there if none runs (its
recovery releases or plugs what the dead one left), and answers with what is
released, which the node takes.  It asks again every ``every_s`` while the
release stays overdue.

Rules:

1. Only the oldest overdue copy of a log is timed: under load the release
   pointer passes it within milliseconds and the watch re-arms on the
   highest copy stored so far.
2. At most one question per log every ``every_s``: the watch never floods an
   owner, whatever the number of copies.
3. A log the owner does not know any more is forgotten (``forget``).
4. A tick costs the logs that are due, not the logs watched: deadlines wait
   in a heap.
5. When the answer shows that a recovered sequencer runs the log (busy,
   releasing late, not dead), the log's patience doubles, up to
   ``patience_max_s``; an answer that shows otherwise sets it back, and a
   release in good time halves it.  An overloaded cluster, whose releases
   lag by seconds, is then not asked about every log every round on top of
   its load, and a sequencer that died is still noticed within a patience
   of the last question that found it alive.
"""

from __future__ import annotations

import heapq
import math

import attrs


@attrs.define
class _Pending:
    target_lsn: int
    since: float
    due: float
    asked_at: float | None = None


class ReleaseWatch:
    def __init__(
        self, *, after_s: float = 1.0, every_s: float = 2.0, patience_max_s: float = 32.0
    ) -> None:
        assert after_s > 0
        assert every_s > 0
        self.after_s = after_s
        self.every_s = every_s
        self.patience_max_s = max(after_s, patience_max_s)
        self._highest: dict[int, int] = {}
        self._pending: dict[int, _Pending] = {}
        #: (due, log); an entry whose log's ``_Pending.due`` differs is stale.
        self._heap: list[tuple[float, int]] = []
        #: Logs whose patience grew (rule 5); the others have ``after_s``.
        self._patience: dict[int, float] = {}

    def _arm(self, log_id: int, target: int, now: float) -> None:
        due = now + self._patience.get(log_id, self.after_s)
        self._pending[log_id] = _Pending(target, now, due)
        self._push(due, log_id)

    def _push(self, due: float, log_id: int) -> None:
        heapq.heappush(self._heap, (due, log_id))
        if len(self._heap) > 4 * len(self._pending) + 1024:  # stale entries: bounded
            self._heap = [(p.due, log) for log, p in self._pending.items()]
            heapq.heapify(self._heap)

    def stored(self, log_id: int, last_lsn: int, release_lsn: int, now: float) -> None:
        """Copies up to ``last_lsn`` were stored; the node's release pointer is ``release_lsn``."""
        if last_lsn > self._highest.get(log_id, 0):
            self._highest[log_id] = last_lsn
        if last_lsn > release_lsn and log_id not in self._pending:
            self._arm(log_id, last_lsn, now)

    def released(self, log_id: int, release_lsn: int, now: float) -> None:
        pending = self._pending.get(log_id)
        if pending is None or release_lsn < pending.target_lsn:
            return
        grown = self._patience.get(log_id)
        if grown is not None and now - pending.since < self.after_s:
            # Released in good time again (rule 5): patience shrinks back.
            if grown / 2 <= self.after_s:
                del self._patience[log_id]
            else:
                self._patience[log_id] = grown / 2
        highest = self._highest.get(log_id, 0)
        if highest > release_lsn:
            self._arm(log_id, highest, now)  # rule 1: re-arm
        else:
            del self._pending[log_id]

    def next_due(self) -> float:
        """When a log is next due (perhaps a stale entry's: early, never
        late); inf when none."""
        return self._heap[0][0] if self._heap else math.inf

    def due(self, now: float) -> list[int]:
        """The logs to ask about now (each marked as asked)."""
        heap, pending = self._heap, self._pending
        out = []
        while heap and heap[0][0] <= now:
            due, log_id = heapq.heappop(heap)
            p = pending.get(log_id)
            if p is None or p.due != due:
                continue
            p.asked_at = now
            p.due = now + self.every_s
            self._push(p.due, log_id)
            out.append(log_id)
        return out

    def answered(self, log_id: int, running: bool) -> None:
        """What the owner's answer showed (rule 5): ``running``, a recovered
        sequencer of the log runs there (the release is late, not lost)."""
        if running:
            grown = 2 * self._patience.get(log_id, self.after_s)
            self._patience[log_id] = min(grown, self.patience_max_s)
        else:
            self._patience.pop(log_id, None)

    def patience(self, log_id: int) -> float:
        """How long a copy of the log may wait for its release before the
        node asks (rule 5)."""
        return self._patience.get(log_id, self.after_s)

    def forget(self, log_id: int) -> None:
        self._pending.pop(log_id, None)
        self._highest.pop(log_id, None)
        self._patience.pop(log_id, None)

    def overdue(self, now: float) -> int:
        """How many logs' releases are overdue now (for a gauge; once a second)."""
        return sum(1 for p in self._pending.values() if p.asked_at is not None or p.due <= now)

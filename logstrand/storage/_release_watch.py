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
"""

from __future__ import annotations

import attrs


@attrs.define
class _Pending:
    target_lsn: int
    since: float
    asked_at: float | None = None


class ReleaseWatch:
    def __init__(self, *, after_s: float = 1.0, every_s: float = 2.0) -> None:
        assert after_s > 0
        assert every_s > 0
        self.after_s = after_s
        self.every_s = every_s
        self._highest: dict[int, int] = {}
        self._pending: dict[int, _Pending] = {}

    def stored(self, log_id: int, last_lsn: int, release_lsn: int, now: float) -> None:
        """Copies up to ``last_lsn`` were stored; the node's release pointer is ``release_lsn``."""
        if last_lsn > self._highest.get(log_id, 0):
            self._highest[log_id] = last_lsn
        if last_lsn > release_lsn and log_id not in self._pending:
            self._pending[log_id] = _Pending(last_lsn, now)

    def released(self, log_id: int, release_lsn: int, now: float) -> None:
        pending = self._pending.get(log_id)
        if pending is None or release_lsn < pending.target_lsn:
            return
        highest = self._highest.get(log_id, 0)
        if highest > release_lsn:
            self._pending[log_id] = _Pending(highest, now)  # rule 1: re-arm
        else:
            del self._pending[log_id]

    def due(self, now: float) -> list[int]:
        """The logs to ask about now (each marked as asked)."""
        out = []
        for log_id, p in self._pending.items():
            if now - p.since < self.after_s:
                continue
            if p.asked_at is not None and now - p.asked_at < self.every_s:
                continue
            p.asked_at = now
            out.append(log_id)
        return out

    def forget(self, log_id: int) -> None:
        self._pending.pop(log_id, None)
        self._highest.pop(log_id, None)

    def overdue(self, now: float) -> list[int]:
        """Logs whose release is overdue now (for a gauge)."""
        return sorted(log for log, p in self._pending.items() if now - p.since >= self.after_s)

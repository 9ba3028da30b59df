"""The bound on a node's activations running at once.  Pure: no trio.

A burst of first appends to ten thousand logs asks for ten thousand
activations (the host core asks at most once per log).  At most ``limit``
run at once (LogDevice's ``max-sequencer-background-activations-in-flight``);
the rest wait in the order they were asked for, their appends with them.
The node's trio shell (``storage._activation``) and the seeded simulation
both drive this queue.
"""

from __future__ import annotations

from collections import deque


class ActivationQueue:
    """``add(log)`` returns the logs to start now (the new one, while fewer
    than ``limit`` run); when one ends, ``finished()`` names the log to start
    in its place, or None when none waits."""

    __slots__ = ("_waiting", "limit", "running")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"activations in flight must be at least 1, not {limit}")
        self.limit = limit
        self.running = 0
        self._waiting: deque[int] = deque()

    def add(self, log_id: int) -> list[int]:
        if self.running < self.limit:
            self.running += 1
            return [log_id]
        self._waiting.append(log_id)
        return []

    def finished(self) -> int | None:
        if self._waiting:
            return self._waiting.popleft()
        self.running -= 1
        return None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

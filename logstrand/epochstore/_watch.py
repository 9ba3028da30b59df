"""Membership watch by polling (the SQLite store has no change notification)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import EpochStoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable


class PollingWatch:
    """Membership watch by polling, for stores without change notification."""

    def __init__(
        self,
        poll: Callable[[], frozenset[int]],
        callback: Callable[[frozenset[int]], None],
        interval_s: float,
    ) -> None:
        self._stop = threading.Event()
        self._poll = poll
        self._callback = callback
        self._interval_s = interval_s
        self._last: frozenset[int] | None = None
        self._thread = threading.Thread(target=self._run, name="member-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now: frozenset[int] | None
            try:
                now = self._poll()
            except EpochStoreUnavailableError:
                now = self._last
            if now is not None and now != self._last:
                self._last = now
                self._callback(now)
            self._stop.wait(self._interval_s)

    def cancel(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

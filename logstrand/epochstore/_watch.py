"""Membership watch by polling (the SQLite store has no change notification)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import EpochStoreUnavailableError
from ._members import signature

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._members import Members


class PollingWatch:
    """Membership watch by polling, for stores without change notification."""

    def __init__(
        self,
        poll: Callable[[], Members],
        callback: Callable[[Members], None],
        interval_s: float,
    ) -> None:
        self._stop = threading.Event()
        self._poll = poll
        self._callback = callback
        self._interval_s = interval_s
        self._last: object = None
        self._thread = threading.Thread(target=self._run, name="member-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = self._poll()
            except EpochStoreUnavailableError:
                now = None
            if now is not None and signature(now) != self._last:
                self._last = signature(now)
                self._callback(now)
            self._stop.wait(self._interval_s)

    def cancel(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

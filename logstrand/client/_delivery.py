"""How a record appended from another thread learns its outcome.

A record in the producer's buffer (``_accumulator``) carries a *ticket*: an
object whose ``finish(lsn, error)`` the client's loop calls once, when the
record's batch is acknowledged or fails.  Two kinds:

- ``Delivery``, the future ``Client.append_async`` returns.  It is a
  ``concurrent.futures.Future`` (``wait``, ``as_completed``,
  ``asyncio.wrap_future`` and callbacks work as usual), but it makes its lock
  only when someone needs one: a future that nobody waits on before it
  finishes, or that is looked at only after, never makes one.  A plain
  future costs a condition, a lock and a notify per record, about as much as
  everything else ``append_async`` does.
- ``_Waiter``, what a thread's sync ``append`` waits on: one per thread,
  reused, a bare lock released when the record finishes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from concurrent.futures._base import FINISHED, RUNNING
from typing import TYPE_CHECKING, Any

from ..errors import Status, TransientError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._accumulator import Accumulator

_log = logging.getLogger("logstrand.client")

#: Guards the lazy making of a ``Delivery``'s condition against its finish.
_MADE = threading.Lock()


class Delivery(concurrent.futures.Future[int]):
    """The LSN of one record handed to ``append_async``, or its error.

    It cannot be cancelled: the record was accepted, and leaves with others.
    """

    def __init__(
        self,
        accumulator: Accumulator,
        size: int,
        on_delivery: Callable[[int, BaseException | None], None] | None,
    ) -> None:
        # Not Future.__init__: its condition is made by __getattr__ when asked for.
        self._state = RUNNING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []
        self._accumulator = accumulator
        self._size = size
        self._on_delivery = on_delivery

    def __getattr__(self, name: str) -> Any:
        if name != "_condition":
            raise AttributeError(name)
        with _MADE:
            condition = self.__dict__.get("_condition")
            if condition is None:
                condition = self.__dict__["_condition"] = threading.Condition()
        return condition

    def cancel(self) -> bool:
        return False

    def done(self) -> bool:
        return self._state == FINISHED

    def result(self, timeout: float | None = None) -> int:
        if self._state == FINISHED:  # set before FINISHED, and never again
            if self._exception is not None:
                raise self._exception
            return int(self._result)
        return super().result(timeout)

    def finish(self, lsn: int, error: BaseException | None) -> None:
        """The record's outcome (on the client's loop, once)."""
        self._accumulator.finished(self._size)
        with _MADE:
            quiet = "_condition" not in self.__dict__
            if quiet:  # nobody waits, and no callback: no lock to take, no one to notify
                if error is None:
                    self._result = lsn
                else:
                    self._exception = error
                self._state = FINISHED
        if not quiet:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                if error is None:
                    self.set_result(lsn)
                else:
                    self.set_exception(error)
        if self._on_delivery is not None:
            try:
                self._on_delivery(lsn, error)
            except Exception:
                _log.exception("on_delivery callback failed")


class _Waiter:
    """What one thread's sync ``append`` waits on; reused for its next one."""

    __slots__ = ("_lock", "accumulator", "error", "lsn", "size")

    def __init__(self, accumulator: Accumulator) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.accumulator = accumulator
        self.size = 0
        self.lsn = 0
        self.error: BaseException | None = None

    def finish(self, lsn: int, error: BaseException | None) -> None:
        self.accumulator.finished(self.size)
        self.lsn = lsn
        self.error = error
        self._lock.release()

    def wait(self, timeout_s: float) -> bool:
        """True once finished (and ready for the next record); False when
        ``timeout_s`` passed first (then this waiter must not be used again)."""
        return self._lock.acquire(timeout=timeout_s)


class Waiters:
    """One ``_Waiter`` per thread of one client."""

    def __init__(self, accumulator: Accumulator) -> None:
        self._accumulator = accumulator
        self._local = threading.local()

    def get(self, size: int) -> _Waiter:
        w: _Waiter | None = getattr(self._local, "waiter", None)
        if w is None:
            w = self._local.waiter = _Waiter(self._accumulator)
        w.size = size
        return w

    def outcome(self, w: _Waiter, timeout_s: float) -> int:
        """Wait for ``w``'s record: its LSN, or its error raised."""
        if not w.wait(timeout_s):
            # It may still finish later: this thread takes a new waiter.
            self._local.waiter = None
            raise TransientError(f"no answer for the append in {timeout_s:g} s", Status.TIMEDOUT)
        if w.error is not None:
            error, w.error = w.error, None
            raise error
        return w.lsn

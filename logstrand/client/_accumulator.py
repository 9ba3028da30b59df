"""Where records appended from other threads wait for the client's I/O loop
(Kafka's ``RecordAccumulator``, librdkafka's queue).

``Client.append_async`` (and ``Client.append``, from any number of threads)
puts a record here under a lock and returns at once: no crossing into the
trio thread per record.  The first record after a drain wakes the loop
(one ``run_sync_soon``); the loop takes everything waiting, per log in the
order it came, and hands it to the log's batcher, which sends it in as few
APPENDs as its limits allow.  So sixteen threads appending one record each
share APPENDs, and a thread's records keep their order.

Memory is bounded: records count against ``buffer_bytes_max`` from when they
are accepted until they are acknowledged or failed.  A caller that would go
over it waits up to ``max_block_s`` for room and then gets
``BufferFullError`` (Kafka's ``buffer.memory`` and ``max.block.ms``).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ..errors import LogstrandError, Status

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._batcher import Ticket

    #: One log's waiting records: payloads, keys, tickets and extras (headers,
    #: ``batch.pack_extra``; None while no record has any), in the order they came.
    Waiting = list[Any]

#: What a record costs beyond its key and payload (its future, its slots).
RECORD_OVERHEAD = 128
#: A waiting thread looks again at least this often.
POLL_S = 0.05


class BufferFullError(LogstrandError):
    """The producer's buffer stayed full for ``max_block_ms``: the cluster
    takes records more slowly than they come."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Status.OVERLOADED)


class Accumulator:
    """Records waiting for the I/O loop, per log (see the module docstring)."""

    def __init__(self, buffer_bytes_max: int, max_block_s: float, wake: Callable[[], None]) -> None:
        self.buffer_bytes_max = buffer_bytes_max
        self.max_block_s = max_block_s
        self._wake = wake
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._logs: dict[int, Waiting] = {}
        self._woken = False
        #: Sizes of records finished on the I/O thread, not yet counted.
        self._freed: list[int] = []
        #: Threads waiting for room or for a flush (they need a notify), and
        #: of them those waiting for room.
        self._waiting = 0
        self._waiting_room = 0
        #: Bytes of records accepted and not yet acknowledged or failed.
        self.bytes = 0
        #: Records accepted and not yet acknowledged or failed.
        self.outstanding = 0

    def add(
        self,
        log_id: int,
        payload: bytes | None,
        key: bytes | None,
        ticket: Ticket,
        size: int,
        extra: bytes | None = None,
    ) -> None:
        """Accept one record of ``size`` (``cost``), waiting for room up to
        ``max_block_s``; ``ticket.finish`` gets its outcome and must call
        ``finished(size)``.  ``extra``: its headers (``batch.pack_extra``)."""
        with self._changed:
            self._fold()
            if self.bytes + size > self.buffer_bytes_max and self.bytes:
                self._wait_for_room(size)
            waiting = self._logs.get(log_id)
            if waiting is None:
                waiting = self._logs[log_id] = [[], [], [], None]
            if extra is not None and waiting[3] is None:
                waiting[3] = [None] * len(waiting[0])
            waiting[0].append(payload)
            waiting[1].append(key)
            waiting[2].append(ticket)
            if waiting[3] is not None:
                waiting[3].append(extra)
            self.bytes += size
            self.outstanding += 1
            wake = not self._woken
            self._woken = True
        if wake:
            self._wake()

    def _wait_for_room(self, size: int) -> None:
        deadline = time.monotonic() + self.max_block_s
        self._waiting += 1
        self._waiting_room += 1
        try:
            while True:
                self._fold()
                if self.bytes + size <= self.buffer_bytes_max or not self.bytes:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BufferFullError(
                        f"the producer's buffer ({self.buffer_bytes_max} bytes, "
                        f"buffer_bytes_max) stayed full for {self.max_block_s:g} s "
                        "(max_block_ms): the cluster takes records more slowly than "
                        "they come, or cannot take them"
                    )
                # Woken when room is freed; a short bound covers a release that
                # came between the check and the wait.
                self._changed.wait(min(left, POLL_S))
        finally:
            self._waiting -= 1
            self._waiting_room -= 1

    def take(self) -> dict[int, Waiting]:
        """Everything waiting (on the I/O thread); the next record wakes it again."""
        with self._lock:
            logs, self._logs = self._logs, {}
            self._woken = False
            return logs

    def finished(self, size: int) -> None:
        """A record was acknowledged or failed: its room is free.  Called on
        the I/O thread for every record, so it takes no lock (``list.append``
        is atomic) unless someone waits for room or for a flush."""
        freed = self._freed
        freed.append(size)
        # A producer waiting for room wants every release; a flush only the
        # last one (read without the lock: a notify missed by a race is made
        # up by the waiters' POLL_S).
        if self._waiting_room or (self._waiting and len(freed) >= self.outstanding):
            with self._changed:
                self._fold()
                self._changed.notify_all()

    def _fold(self) -> None:
        """Count what was freed (with the lock held)."""
        freed = self._freed
        n = len(freed)
        if n:
            total = sum(freed[:n])
            del freed[:n]
            self.bytes -= total
            self.outstanding -= n

    def flush(self, timeout_s: float | None) -> bool:
        """Wait until every record accepted so far is acknowledged or failed
        (and whatever other threads add meanwhile); False if ``timeout_s``
        passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            self._waiting += 1
            try:
                while True:
                    self._fold()
                    if not self.outstanding:
                        return True
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._changed.wait(POLL_S if left is None else min(left, POLL_S))
            finally:
                self._waiting -= 1

    def pending(self) -> int:
        """Records accepted and not yet acknowledged or failed."""
        with self._lock:
            self._fold()
            return self.outstanding


def cost(payload: bytes | None, key: bytes | None, extra: bytes | None = None) -> int:
    return len(payload or b"") + len(key or b"") + len(extra or b"") + RECORD_OVERHEAD

"""A client's idempotent producer: its ids and its numbering per log.

The client gets a producer id from the cluster (``allocate_producer_id`` in
the epoch store) at its first append and numbers the records it appends to
each log from 0; every batch carries (id, number of its first record), and a
batch keeps its number through every retry, so a sequencer that already took
it answers with its LSNs instead of storing it again (``logstrand.idempotence``).

Batches are numbered in the order they leave, and at most ``WINDOW`` of one
log are out at once: a sequencer refuses a batch whose predecessor it has
not taken (OUT_OF_SEQUENCE), and it is sent again once the predecessor is in,
so appends keep their order with several batches in flight.

When a batch fails for good (a timeout: it may or may not be stored), the
batches numbered after it can no longer follow it; the next batch of the
log starts a new numbering under a fresh id instead (``reset``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ._model import WINDOW

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: Producer ids fetched at a time for resets.
_SPARES = 4


class ProducerIds:
    """The client's producer ids: one for every log, and spares for resets."""

    def __init__(
        self, allocate: Callable[[int], Awaitable[list[int]]], fixed: int | None = None
    ) -> None:
        #: ``allocate(n)``: n new producer ids from the cluster (the epoch store).
        self.allocate = allocate
        self.main: int | None = fixed
        self.fixed = fixed is not None
        self._spares: list[int] = []
        self._lock = trio.Lock()

    @property
    def is_ready(self) -> bool:
        """``ready`` would not wait."""
        return self.main is not None and bool(self._spares or self.fixed)

    async def ready(self) -> None:
        """Make sure ``main`` and a spare exist (one epoch store call, rarely;
        no await at all otherwise, so appends keep the order they came in)."""
        if self.main is not None and (self._spares or self.fixed):
            return
        async with self._lock:
            if self.main is not None and (self._spares or self.fixed):
                return
            need = (self.main is None) + _SPARES * (not self.fixed)
            ids = await self.allocate(need)
            if self.main is None:
                self.main = ids.pop(0)
            self._spares += ids

    def spare(self) -> int:
        if not self._spares:  # (``ready`` was not awaited: keep the id)
            assert self.main is not None
            return self.main
        return self._spares.pop()


class LogProducer:
    """One log's numbering (see the module docstring)."""

    def __init__(self, ids: ProducerIds, on_room: Callable[[], None]) -> None:
        self.ids = ids
        self.pid: int | None = None
        self.next_seq = 0
        #: (producer id, first number) of the batches out now, in the order
        #: they left (after a reset, the old id's last ones may still be out).
        self.outstanding: list[tuple[int, int]] = []
        self.broken = False
        #: Batches acknowledged so far: a refusal for being out of sequence
        #: that was sent before the last of them may be stale.
        self.acks = 0
        self._on_room = on_room
        self._freed = trio.Event()

    async def settle(self) -> None:
        """After an out-of-sequence refusal: wait until a batch of the log
        ends (its predecessor, likely), at most 50 ms."""
        with trio.move_on_after(0.05):
            await self._freed.wait()

    def room(self) -> bool:
        return len(self.outstanding) < WINDOW

    async def wait_room(self) -> None:
        while not self.room():
            await self._freed.wait()

    def number(self, count: int) -> tuple[int, int]:
        """(producer id, first number) for the next batch of ``count`` records."""
        if self.broken and self.ids.fixed:
            # A fixed id (a Spark task's) never starts over: the task is
            # run again from its start under the same id instead.
            self.broken = False
        if self.pid is None or self.broken:
            self.pid = self.ids.main if self.pid is None else self.ids.spare()
            assert self.pid is not None
            self.next_seq = 0
            self.broken = False
        seq = self.next_seq
        self.next_seq += count
        self.outstanding.append((self.pid, seq))
        return self.pid, seq

    def hopeless(self, pid: int, seq: int, acks_then: int) -> bool:
        """A refusal (out of sequence, unknown producer) of an attempt sent
        when ``acks`` was ``acks_then``: True when retrying cannot help.
        While an earlier batch of the producer is out, it may yet arrive;
        and an earlier batch acknowledged since the attempt left may have
        arrived just after it."""
        oldest = min((s for p, s in self.outstanding if p == pid), default=None) == seq
        return oldest and self.acks == acks_then

    def done(self, pid: int, seq: int, *, failed: bool) -> None:
        if (pid, seq) in self.outstanding:
            self.outstanding.remove((pid, seq))
        if failed and pid == self.pid:
            self.broken = True
        if not failed:
            self.acks += 1
        self._freed.set()
        self._freed = trio.Event()
        self._on_room()

"""Coalescing: concurrent appends to one log wait in a ``_LogBatcher`` while
``inflight_batches_per_log`` APPENDs are out, then leave together in the next
one (``linger_ms`` makes a lone append wait for company first).  Each record
carries a ``Ticket`` that learns its LSN or its error: ``_Pending`` for an
awaited ``AsyncClient.append``, the tickets of ``_delivery`` for records from
other threads."""

from __future__ import annotations

import copy
from functools import partial
from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..errors import LogstrandError
    from ..idempotence._client import LogProducer
    from ._settings import ClientSettings


class Appender(Protocol):
    """What a batcher needs of the client's ``_appender.Appender``."""

    settings: ClientSettings
    nursery: trio.Nursery

    def producer(self, log_id: int) -> LogProducer | None: ...
    def batch_end(self, payloads: Sequence[bytes | None], start: int) -> int: ...
    def launch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        number: tuple[int, int] | None,
        extras: Sequence[bytes | None] | None,
        done: Callable[[int, BaseException | None], None],
    ) -> None: ...


class Ticket(Protocol):
    """What learns one record's outcome: called once, on the client's loop."""

    def finish(self, lsn: int, error: BaseException | None) -> None: ...


class _Pending:
    """One record of an ``AsyncClient.append`` awaiting its outcome."""

    __slots__ = ("error", "event", "lsn")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.lsn = 0
        self.error: BaseException | None = None

    def finish(self, lsn: int, error: BaseException | None) -> None:
        self.lsn = lsn
        self.error = error
        self.event.set()


def _finish_all(tickets: Sequence[Ticket], first: int, error: BaseException | None) -> None:
    """Each record of a batch learns its LSN, or the batch's error (a copy
    each: threads that raise it at once must not share one traceback)."""
    if error is None:
        for i, t in enumerate(tickets):
            t.finish(first + i, None)
    else:
        for t in tickets:
            t.finish(0, _own(error))


def _own(error: BaseException) -> BaseException:
    try:
        mine = copy.copy(error)
    except Exception:  # an exception that cannot be copied: shared, as before
        return error
    return mine if type(mine) is type(error) else error


def _size(payload: bytes | None) -> int:
    return len(payload) if payload else 0


class _LogBatcher:
    """Coalesces concurrent appends to one log into few APPENDs."""

    def __init__(self, appender: Appender, log_id: int) -> None:
        self.appender = appender
        self.log_id = log_id
        self.payloads: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        #: The waiting records' headers (``batch.pack_extra``); None while none has any.
        self.extras: list[bytes | None] | None = None
        self.waiters: list[Ticket] = []
        self.bytes = 0
        self.inflight = 0
        self.lingering = False

    async def add(self, payload: bytes | None, key: bytes | None, extra: bytes | None) -> int:
        w = _Pending()
        self._extras_of(1, None if extra is None else [extra])
        self.payloads.append(payload)
        self.keys.append(key)
        self.waiters.append(w)
        self.bytes += _size(payload)
        self._start()
        await w.event.wait()
        if w.error is not None:
            raise w.error
        return w.lsn

    def enqueue(
        self,
        payloads: list[bytes | None],
        keys: list[bytes | None],
        tickets: list[Ticket],
        extras: list[bytes | None] | None = None,
    ) -> None:
        """Records from the accumulator, each with its ticket (no task each)."""
        self._extras_of(len(payloads), extras)
        self.payloads += payloads
        self.keys += keys
        self.waiters += tickets
        self.bytes += sum(_size(p) for p in payloads)
        self._start()

    def _extras_of(self, n: int, extras: list[bytes | None] | None) -> None:
        """Keep the extras of ``n`` records coming, beside those waiting."""
        if extras is not None and self.extras is None:
            self.extras = [None] * len(self.payloads)
        if self.extras is not None:
            self.extras += [None] * n if extras is None else extras

    def _start(self) -> None:
        """Send what waits now, or linger for more (``linger_ms``)."""
        s = self.appender.settings
        if self._may_launch():
            if s.linger_ms > 0 and self.bytes < s.batch_bytes_max:
                self.lingering = True
                self.appender.nursery.start_soon(self._linger)
            else:
                self.poke()

    async def _linger(self) -> None:
        await trio.sleep(self.appender.settings.linger_ms / 1000)
        self.lingering = False
        self.poke()

    def _may_launch(self) -> bool:
        producer = self.appender.producer(self.log_id)
        return (
            self.inflight < self.appender.settings.inflight_batches_per_log
            and not self.lingering
            and (producer is None or producer.room())
        )

    def poke(self) -> None:
        """Launch what waits, as far as there is room (a batch of the log finished)."""
        while self.waiters and self._may_launch():
            self._launch()

    def _launch(self) -> None:
        n = self.appender.batch_end(self.payloads, 0)
        size = sum(_size(p) for p in self.payloads[:n])
        payloads, self.payloads = self.payloads[:n], self.payloads[n:]
        keys, self.keys = self.keys[:n], self.keys[n:]
        extras = None
        if self.extras is not None:
            # The column goes when nothing waits (not when what waits has none:
            # a batch of records without extras packs as one without them).
            extras, self.extras = self.extras[:n], self.extras[n:] or None
        waiters, self.waiters = self.waiters[:n], self.waiters[n:]
        self.bytes -= size
        self.inflight += 1
        producer = self.appender.producer(self.log_id)
        number = producer.number(n) if producer is not None else None
        # No task per batch: the batch waits in its node's outbox and
        # ``_sent`` hears how it ended (``Appender.launch``).
        self.appender.launch(
            self.log_id, payloads, keys, number, extras, partial(self._sent, waiters)
        )

    def _sent(self, waiters: list[Ticket], first: int, error: BaseException | None) -> None:
        """A batch of this log ended: its records learn how, and what
        waits may leave."""
        self.inflight -= 1
        _finish_all(waiters, first, error)
        self.poke()

    def fail_waiting(self, error: LogstrandError) -> None:
        """The client closes: what was never sent fails with ``error``."""
        waiters, self.waiters = self.waiters, []
        self.payloads, self.keys, self.extras, self.bytes = [], [], None, 0
        _finish_all(waiters, 0, error)

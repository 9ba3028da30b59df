"""The client's append path: coalescing, checks and producer numbering.

Coalescing: concurrent appends to one log wait in a batcher (``_batcher``)
while ``inflight_batches_per_log`` APPENDs are out, then leave together.
Each batch's attempts (routing, redirects, retries, the per-node outbox)
are ``_attempts``'s.

Idempotence (on by default, ``idempotence._client``): every batch carries the
client's producer id and the number of its first record, kept through every
retry, so an APPEND whose answer was lost and that is sent again is answered
with the LSNs it got, not stored twice.  With ``idempotent=False`` delivery
is at least once: such a batch may be stored twice.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..batch import PackedBatch
from ..errors import ClosedError, InvalidArgumentError, LogstrandError, NotFoundError
from ..idempotence._client import LogProducer, ProducerIds
from ..records import FLAGS_APPENDED, KEY_BYTES_MAX, check_log_id
from ._attempts import Attempts
from ._batcher import Ticket, _finish_all, _LogBatcher
from ._settings import check_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


@attrs.define(eq=False)
class Appender(Attempts):
    """Appends of one client (see the module docstring)."""

    _batchers: dict[int, _LogBatcher] = attrs.field(init=False, factory=dict)
    #: Records of logs being looked up (``enqueue``), in the order they came.
    _cold: dict[int, list[tuple[Any, Any, list[Ticket], Any]]] = attrs.field(
        init=False, factory=dict
    )
    _ids: ProducerIds = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        astore = self.view.astore

        async def allocate(n: int) -> list[int]:
            return await astore.run(lambda s: [s.allocate_producer_id() for _ in range(n)])

        self._ids = ProducerIds(allocate, self.settings.producer_id)

    def producer(self, log_id: int) -> LogProducer | None:
        """The log's numbering, with idempotent appends (else None)."""
        if not self.settings.idempotent:
            return None
        p = self._producers.get(log_id)
        if p is None:
            p = self._producers[log_id] = LogProducer(self._ids, partial(self._poke, log_id))
        return p

    def _poke(self, log_id: int) -> None:
        batcher = self._batchers.get(log_id)
        if batcher is not None:
            batcher.poke()

    def _batcher(self, log_id: int) -> _LogBatcher:
        batcher = self._batchers.get(log_id)
        if batcher is None:
            batcher = self._batchers[log_id] = _LogBatcher(self, log_id)
        return batcher

    async def append(
        self, log_id: int, payload: bytes | None, key: bytes | None, extra: bytes | None = None
    ) -> int:
        await self.check(log_id, [payload], [key], None if extra is None else [extra])
        return await self._batcher(log_id).add(payload, key, extra)

    def enqueue(
        self,
        log_id: int,
        payloads: list[bytes | None],
        keys: list[bytes | None],
        tickets: list[Ticket],
        extras: list[bytes | None] | None = None,
    ) -> None:
        """Records from the accumulator (on the loop's thread, without
        waiting; keys, payloads and extras were checked by the caller's thread).  A
        log not known yet (or before the producer ids are) is looked up by
        one task, and what comes for it meanwhile queues behind, in order."""
        cold = self._cold.get(log_id)
        if cold is not None:
            cold.append((payloads, keys, tickets, extras))
            return
        ready = not self.settings.idempotent or self._ids.is_ready
        if ready and self.view.log_attributes(log_id) is not None:
            self._batcher(log_id).enqueue(payloads, keys, tickets, extras)
            return
        try:
            self.nursery.start_soon(self._warm, log_id)
        except RuntimeError:  # the client is closing: its nursery takes no new tasks
            _finish_all(tickets, 0, ClosedError("client is closed"))
            return
        self._cold[log_id] = [(payloads, keys, tickets, extras)]

    def fail_waiting(self, error: LogstrandError) -> None:
        """The client closes: records not sent yet fail with ``error``."""
        for chunks in self._cold.values():
            for _, _, tickets, _ in chunks:
                _finish_all(tickets, 0, error)
        self._cold.clear()
        for batcher in self._batchers.values():
            batcher.fail_waiting(error)

    async def _warm(self, log_id: int) -> None:
        error: LogstrandError | None = None
        try:
            await self.check(log_id, (), ())
        except LogstrandError as exc:
            error = exc
        for payloads, keys, tickets, extras in self._cold.pop(log_id, []):
            if error is None:
                self._batcher(log_id).enqueue(payloads, keys, tickets, extras)
            else:
                _finish_all(tickets, 0, error)

    async def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        extras: Sequence[bytes | None] | None = None,
    ) -> list[int]:
        if keys is not None and len(keys) != len(payloads):
            raise InvalidArgumentError("keys and payloads differ in length")
        key_list = list(keys) if keys is not None else [None] * len(payloads)
        await self.check(log_id, payloads, key_list, extras)

        spans: list[tuple[int, int]] = []
        start = 0
        while start < len(payloads):
            spans.append((start, self.batch_end(payloads, start)))
            start = spans[-1][1]

        def build(start: int, end: int, number: tuple[int, int] | None, codec: int) -> PackedBatch:
            ex = None if extras is None else extras[start:end]
            return PackedBatch.for_append(
                key_list[start:end], payloads[start:end], codec, number, ex
            )

        lsns: list[int] = []
        firsts = await self.append_spans(log_id, spans, build)
        for (start, end), first in zip(spans, firsts, strict=True):
            lsns.extend(range(first, first + end - start))
        return lsns

    async def append_spans(
        self,
        log_id: int,
        spans: Iterable[tuple[int, int]],
        build: Callable[[int, int, tuple[int, int] | None, int], PackedBatch],
    ) -> list[int]:
        """The first LSN of each span of records ``[start, end)``, appended
        in order, one APPEND each, as ``build(start, end, number, codec)``
        packs it (the span's producer numbering, the log's codec).  The
        caller has checked the log and the records."""
        firsts: list[int] = []
        producer = self.producer(log_id)
        for start, end in spans:
            number = None
            if producer is not None:
                await producer.wait_room()
                number = producer.number(end - start)
            firsts.append(await self.send(log_id, partial(build, start, end, number), number))
        return firsts

    def batch_end(self, payloads: Sequence[bytes | None], start: int) -> int:
        """Where the APPEND that starts at ``start`` ends (at least one record)."""
        return self.settings.batch_end(payloads, start)

    async def check(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        extras: Sequence[bytes | None] | None = None,
    ) -> None:
        """Refuse what no node would take, before anything is sent."""
        check_log_id(log_id)
        check_bytes("payload", payloads, self.settings.payload_bytes_max)
        check_bytes("key", keys, KEY_BYTES_MAX)
        if extras is not None:
            if len(extras) != len(payloads):
                raise InvalidArgumentError("headers and payloads differ in length")
            check_bytes("headers", extras, self.settings.payload_bytes_max)
        if self.view.log_attributes(log_id) is None:
            await self.view.refresh()
            if self.view.log_attributes(log_id) is None:
                raise NotFoundError(f"log {log_id} does not exist")
        if self.settings.idempotent:
            await self._ids.ready()

    async def append_numbered(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        number: tuple[int, int] | None,
        extras: Sequence[bytes | None] | None = None,
        flags: int = 0,
    ) -> int:
        """One APPEND numbered by a producer outside this client (the Kafka
        front's idempotent producers), or by none (``number`` None: a
        transaction's marker), with the appender's ``flags``: retried as any
        APPEND, a refusal for its numbering is the caller's to handle
        (``ProducerError``)."""
        await self.check(log_id, payloads, keys, extras)
        # ``check`` has validated every key and payload: no second pass
        # here.  Not this client's numbering: its producers hear nothing.
        batch = PackedBatch.for_append(
            keys, payloads, self._codec(log_id), number, extras, flags & FLAGS_APPENDED
        )
        deadline = trio.current_time() + self.settings.append_timeout_s
        return await self._retry(log_id, batch, number, deadline, own=False)

"""The client's append path: coalescing, routing and retries.

Routing: the client computes, like the nodes, which live node runs a log's
sequencer (rendezvous hashing over the membership) and sends APPEND there.
A REDIRECTED answer names the right node (followed at once, unless it leads
back to a node that already sent the append away); connection loss, a sequencer that
is moving (PREEMPTED, NOSEQUENCER, NOTREADY) or overload are retried with
backoff until the append timeout.  What cannot succeed raises at once:
NOTFOUND (unknown log), TOOBIG, BADPAYLOAD, NOKEY.

Coalescing: concurrent appends to one log wait in a batcher (``_batcher``)
while ``inflight_batches_per_log`` APPENDs are out, then leave together.

Idempotence (on by default, ``idempotence._client``): every batch carries the
client's producer id and the number of its first record, kept through every
retry, so an APPEND whose answer was lost and that is sent again is answered
with the LSNs it got, not stored twice.  With ``idempotent=False`` delivery
is at least once: such a batch may be stored twice.
"""

from __future__ import annotations

import contextlib
import random
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _trace
from ..batch import Codec, PackedBatch
from ..errors import (
    AccessDeniedError,
    ClosedError,
    DuplicateAppendError,
    InvalidArgumentError,
    LogstrandError,
    NotFoundError,
    ProducerError,
    Status,
    TransientError,
)
from ..idempotence._client import LogProducer, ProducerIds
from ..records import KEY_BYTES_MAX, check_log_id
from ..wire import Append, AppendMany, AppendReply, ErrorReply
from ._append_mux import MANY_PROTOCOL, Entry, NodeMux, send_alone, settle
from ._batcher import Ticket, _finish_all, _LogBatcher
from ._settings import check_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ..rpc import ClusterView, Links
    from ._nodewatch import NodeWatch
    from ._settings import ClientSettings

_FATAL = {
    Status.TOOBIG: InvalidArgumentError,
    Status.INVALID_PARAM: InvalidArgumentError,
    Status.BADPAYLOAD: InvalidArgumentError,
    Status.NOKEY: InvalidArgumentError,
    Status.ACCESS: AccessDeniedError,
    Status.DUPLICATE: DuplicateAppendError,
}
#: Refusals of an idempotent batch that mean "not yet" while an earlier
#: batch of the same producer is still out, and "never" once it is the oldest.
_SEQUENCE = (Status.OUT_OF_SEQUENCE, Status.UNKNOWN_PRODUCER)
#: An attempt made before a retrying loop starts: (node, its outcome, the
#: producer's acknowledgements before it).
_First = tuple[int, tuple[AppendReply | None, str], int]


@attrs.define(eq=False)
class Appender:
    """Appends of one client (see the module docstring)."""

    view: ClusterView
    links: Links
    nursery: trio.Nursery
    settings: ClientSettings
    #: Gives up on a node the other nodes find dead (``_nodewatch``).
    watch: NodeWatch
    _batchers: dict[int, _LogBatcher] = attrs.field(init=False, factory=dict)
    #: Records of logs being looked up (``enqueue``), in the order they came.
    _cold: dict[int, list[tuple[Any, Any, list[Ticket], Any]]] = attrs.field(
        init=False, factory=dict
    )
    #: Where a node said a log's sequencer runs (REDIRECTED).
    _hint: dict[int, int] = attrs.field(init=False, factory=dict)
    _ids: ProducerIds = attrs.field(init=False)
    _producers: dict[int, LogProducer] = attrs.field(init=False, factory=dict)
    #: APPENDs out to each node (``appends_in_flight_per_node``).
    _windows: dict[int, trio.Semaphore] = attrs.field(init=False, factory=dict)
    #: Each node's outbox of APPENDs that leave together (``_append_mux``).
    _muxes: dict[int, NodeMux] = attrs.field(init=False, factory=dict)

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
        number: tuple[int, int],
        extras: Sequence[bytes | None] | None = None,
    ) -> int:
        """One APPEND numbered by a producer outside this client (the Kafka
        front's idempotent producers): retried as any APPEND, a refusal for
        its numbering is the caller's to handle (``ProducerError``)."""
        await self.check(log_id, payloads, keys, extras)
        return await self._append_rpc(
            log_id,
            lambda codec: PackedBatch.for_append(keys, payloads, codec, number, extras),
            number,
            own=False,
        )

    async def append_rpc(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        number: tuple[int, int] | None = None,
        extras: Sequence[bytes | None] | None = None,
    ) -> int:
        """One APPEND of these records (``send``)."""
        return await self.send(
            log_id,
            lambda codec: PackedBatch.for_append(keys, payloads, codec, number, extras),
            number,
        )

    async def send(
        self,
        log_id: int,
        build: Callable[[int], PackedBatch],
        number: tuple[int, int] | None = None,
    ) -> int:
        """One APPEND of the batch ``build`` packs with the log's codec,
        retried until it succeeds, fails for good, or times out.

        ``number``: the batch's (producer id, first number) from the log's
        ``LogProducer``, which hears how it ended."""
        batch = build(self._codec(log_id))
        deadline = trio.current_time() + self.settings.append_timeout_s
        return await self._send_built(log_id, batch, number, deadline, None)

    def launch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        number: tuple[int, int] | None,
        extras: Sequence[bytes | None] | None,
        done: Callable[[int, BaseException | None], None],
    ) -> None:
        """``send`` without a task while it goes well (``_append_mux`` rule
        6): the batch's first attempt waits in its node's outbox, and ``done``
        gets (first LSN, None) from the task of the request that carried it.
        Only an attempt that did not succeed becomes a task of its own, which
        goes on from that outcome as ``send`` would have, until ``done(0,
        error)`` or success."""
        batch = PackedBatch.for_append(keys, payloads, self._codec(log_id), number, extras)
        deadline = trio.current_time() + self.settings.append_timeout_s
        node = self._route(log_id)
        if node is None:
            self._slowly(log_id, batch, number, deadline, done, None)
            return
        producer = self._producers.get(log_id)
        acks_then = producer.acks if producer is not None else 0

        def outcome(entry: Entry) -> None:
            reply = entry.outcome[0]
            if reply is not None and reply.status == Status.OK and not entry.alone:
                if number is not None and producer is not None:
                    producer.done(*number, failed=False)
                done(reply.first_lsn, None)
                return
            # Anything else takes the retrying path, from this outcome (an
            # entry refused as part of a request has none: tried again).
            first = None if entry.alone else (node, entry.outcome, acks_then)
            self._slowly(log_id, batch, number, deadline, done, first)

        self._mux(node).launch(log_id, batch, outcome)

    def _slowly(
        self,
        log_id: int,
        batch: PackedBatch,
        number: tuple[int, int] | None,
        deadline: float,
        done: Callable[[int, BaseException | None], None],
        first: _First | None,
    ) -> None:
        """The rest of a launched batch's life in a task (``launch``)."""

        async def run() -> None:
            lsn = 0
            error: BaseException | None = None
            try:
                lsn = await self._send_built(log_id, batch, number, deadline, first)
            except LogstrandError as exc:
                error = exc
            except BaseException:  # cancelled: the client is closing
                error = ClosedError("client is closed")
                raise
            finally:
                done(lsn, error)

        try:
            self.nursery.start_soon(run)
        except RuntimeError:  # the client is closing: its nursery takes no new tasks
            producer = self._producers.get(log_id)
            if number is not None and producer is not None:
                producer.done(*number, failed=True)
            done(0, ClosedError("client is closed"))

    async def _send_built(
        self,
        log_id: int,
        batch: PackedBatch,
        number: tuple[int, int] | None,
        deadline: float,
        first: _First | None,
    ) -> int:
        failed = True
        try:
            lsn = await self._retry(log_id, batch, number, deadline, first=first)
            failed = False
            return lsn
        except DuplicateAppendError:
            failed = False
            raise
        finally:
            producer = self._producers.get(log_id)
            if number is not None and producer is not None:
                producer.done(*number, failed=failed)

    def _codec(self, log_id: int) -> int:
        attributes = self.view.log_attributes(log_id)
        return Codec.parse(attributes.compression) if attributes is not None else Codec.NONE

    def _route(self, log_id: int) -> int | None:
        """Where an attempt for ``log_id`` goes now: where a node said its
        sequencer runs, or where the view hashes it."""
        node = self._hint.get(log_id)
        if node is None or not self._routable(node):
            node = self.view.sequencer_node(log_id)
        return node

    async def _append_rpc(
        self,
        log_id: int,
        build: Callable[[int], PackedBatch],
        number: tuple[int, int] | None,
        *,
        own: bool = True,
    ) -> int:
        # ``check`` has validated every key and payload: no second pass here.
        # The body is packed (and compressed) once, with its checksum, and
        # travels unchanged to every node that stores it and every reader.
        batch = build(self._codec(log_id))
        deadline = trio.current_time() + self.settings.append_timeout_s
        return await self._retry(log_id, batch, number, deadline, own=own)

    async def _retry(
        self,
        log_id: int,
        batch: PackedBatch,
        number: tuple[int, int] | None,
        deadline: float,
        *,
        own: bool = True,
        first: _First | None = None,
    ) -> int:
        """Attempts until one succeeds, the append fails for good, or
        ``deadline``; ``first``: an attempt already made (node, outcome,
        the producer's acks before it), taken as this loop's first."""
        backoff = 0.01
        last = "no attempt"
        producer = self._producers.get(log_id) if own else None
        #: Nodes that sent this append elsewhere since the last pause.
        redirected_by: set[int] = set()
        again = False  # a retry waits at the front of its node's outbox
        node: int | None
        reply: AppendReply | None
        with trio.move_on_at(deadline):
            while True:
                if first is not None:
                    node, (reply, last), acks_then = first
                    first = None
                    again = True
                else:
                    node = self._route(log_id)
                    reply = None
                    if node is None:
                        last = "no live node can run the sequencer"
                    else:
                        acks_then = producer.acks if producer is not None else 0
                        reply, last = await self._try(node, log_id, batch, again)
                        again = True
                if node is not None:
                    if reply is not None:
                        status = Status(reply.status)
                        if status == Status.OK:
                            return reply.first_lsn
                        last = f"{status.name}: {reply.message}"
                        if status == Status.REDIRECTED and reply.redirect is not None:
                            if self._follow(log_id, node, reply.redirect, redirected_by):
                                continue
                        elif status == Status.NOTFOUND:
                            await self.view.refresh()
                            if self.view.log_attributes(log_id) is None:
                                raise NotFoundError(f"log {log_id} does not exist")
                        elif status in _FATAL:
                            raise _FATAL[status](reply.message, status)
                        elif status in _SEQUENCE:
                            if (
                                number is None
                                or producer is None
                                or producer.hopeless(*number, acks_then)
                            ):
                                raise ProducerError(reply.message, status)
                            # An earlier batch is still out: once it is in, this follows.
                            await producer.settle()
                            continue
                    else:
                        self._hint.pop(log_id, None)
                with contextlib.suppress(LogstrandError):
                    await self.view.refresh()
                await trio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 0.5)
        raise TransientError(
            f"append to log {log_id} timed out after {self.settings.append_timeout_s} s ({last})",
            Status.TIMEDOUT,
        )

    def _follow(self, log_id: int, node: int, to: int, redirected_by: set[int]) -> bool:
        """Whether to follow ``node``'s redirect to ``to`` at once: yes, unless
        it leads back to a node that already sent this append away (nodes
        whose views disagree, as about a node coming back from its hold-down,
        would bounce it as fast as they answer); then the append waits, as
        for any refusal.  The hint is kept either way."""
        redirected_by.add(node)
        self._hint[log_id] = to
        if to not in redirected_by and self._routable(to):
            return True
        redirected_by.clear()
        return False

    def _routable(self, node: int) -> bool:
        """Whether an append may go to ``node`` now (a hint is used only then)."""
        return node in self.view.up and not self.view.suspected(node)

    async def _try(
        self, node: int, log_id: int, batch: PackedBatch, again: bool = False
    ) -> tuple[AppendReply | None, str]:
        """One attempt: alone, or with other logs' batches to the same node
        (``_append_mux``)."""
        return await self._mux(node).attempt(log_id, batch, again=again)

    def _mux(self, node: int) -> NodeMux:
        mux = self._muxes.get(node)
        if mux is None:
            mux = self._muxes[node] = NodeMux(
                self.nursery,
                partial(self._alone, node),
                partial(self._together, node),
                self.settings.appends_in_flight_per_node,
            )
        return mux

    async def _alone(
        self, node: int, log_id: int, batch: PackedBatch
    ) -> tuple[AppendReply | None, str]:
        # At most ``appends_in_flight_per_node`` APPENDs wait on one node; the
        # rest wait here, their attempt's clock not yet running.  (Ten
        # thousand logs' appends at once used to all be out, and past the
        # node's intake they waited unread until their attempts timed out and
        # were sent again.)
        window = self._windows.get(node)
        if window is None:
            window = self._windows[node] = trio.Semaphore(self.settings.appends_in_flight_per_node)
        async with window:
            return await self._attempt(node, log_id, batch)

    async def _together(self, node: int, entries: list[Entry]) -> None:
        """One ``AppendMany`` attempt for ``entries`` (``_append_mux`` rule 3)."""
        reply: object = None
        gone = False
        with trio.move_on_after(self.settings.append_attempt_timeout_s) as attempt:
            try:
                link = await self.links.get(node)
            except TransientError as exc:
                settle(entries, None, str(exc))
                return
            except LogstrandError:
                # Refused for good (a login the node does not take): each
                # entry goes alone, and its own task raises it.
                send_alone(entries)
                return
            if link.conn.protocol < MANY_PROTOCOL:
                send_alone(entries)
                return
            rid = self.links.next_request_id()
            request = AppendMany(
                rid, tuple(e.log_id for e in entries), tuple(e.batch for e in entries)
            )
            reply, gone = await link.request_or_give_up(
                request, rid, partial(self.watch.wait_gone, node), self.watch.suspect_after_s
            )
        if isinstance(reply, ErrorReply):
            send_alone(entries)
            return
        why = ""
        if gone:
            why = f"node {node} stopped answering (the other nodes find it dead)"
        elif attempt.cancelled_caught:
            why = f"node {node} did not answer in time"
        elif reply is None:
            why = f"connection to node {node} lost"
        settle(entries, reply, why)

    async def _attempt(
        self, node: int, log_id: int, batch: PackedBatch
    ) -> tuple[AppendReply | None, str]:
        timeout = self.settings.append_attempt_timeout_s
        reply: object = None
        gone = False
        with trio.move_on_after(timeout) as attempt:
            try:
                link = await self.links.get(node)  # suspects the node when it fails
            except TransientError as exc:
                return None, str(exc)
            rid = self.links.next_request_id()
            # A node slow to answer may have stopped: the nodes' failure
            # detector says so before its session runs out (``_nodewatch``).
            # The first attempt may still succeed later; idempotent appends
            # make a second one harmless.
            watch = self.watch
            if _trace.ON:
                _trace.mark("client.send")
            reply, gone = await link.request_or_give_up(
                Append(rid, log_id, batch),
                rid,
                partial(watch.wait_gone, node),
                watch.suspect_after_s,
            )
        if _trace.ON:
            _trace.mark("client.reply")
        if gone:
            return None, f"node {node} stopped answering (the other nodes find it dead)"
        if attempt.cancelled_caught:
            return None, f"node {node} did not answer in time"
        if reply is None:
            return None, f"connection to node {node} lost"
        if isinstance(reply, ErrorReply):
            # Refused at the node's door (no permission, unknown log): the
            # same statuses an AppendReply carries.
            reply = AppendReply(reply.request_id, reply.status, message=reply.message[:1024])
        assert isinstance(reply, AppendReply)
        return reply, ""

"""A batch's attempts: routing, retries and the per-node outbox.

Routing: the client computes, like the nodes, which live node runs a log's
sequencer (rendezvous hashing over the membership) and sends APPEND there.
A REDIRECTED answer names the right node (followed at once, unless it leads
back to a node that already sent the append away); connection loss, a
sequencer that is moving (PREEMPTED, NOSEQUENCER, NOTREADY) or overload are
retried with backoff until the append timeout.  What cannot succeed raises
at once: NOTFOUND (unknown log), TOOBIG, BADPAYLOAD, NOKEY.

A batch's first attempt needs no task (``launch``): it waits in its node's
outbox (``_append_mux``) and the request's task finishes it; only an attempt
that did not succeed becomes a task, which goes on through ``_retry``.
"""

from __future__ import annotations

import contextlib
import random
from functools import partial
from typing import TYPE_CHECKING, assert_never

import attrs
import trio

from .. import _trace
from ..batch import Codec, PackedBatch
from ..errors import (
    ClosedError,
    DuplicateAppendError,
    LogstrandError,
    NotFoundError,
    Status,
    TransientError,
)
from ..wire import Append, AppendMany, AppendReply, ErrorReply
from ._append_mux import MANY_PROTOCOL, Entry, NodeMux, send_alone, settle
from ._append_next import CheckLog, Done, Fail, Follow, Pause, Settle, after_reply

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..idempotence._client import LogProducer
    from ..rpc import ClusterView, Links
    from ._nodewatch import NodeWatch
    from ._settings import ClientSettings

#: An attempt made before a retrying loop starts: (node, its outcome, the
#: producer's acknowledgements before it).
_First = tuple[int, tuple[AppendReply | None, str], int]
#: The retries' jitter.  Its own generator, not the random module's: a
#: library's threads must not move the state a user seeded (hypothesis took
#: a client's retry, in a thread of the test process, for a strategy's use).
_JITTER = random.Random()


@attrs.define(eq=False)
class Attempts:
    """The attempts of one client's batches (see the module docstring)."""

    view: ClusterView
    links: Links
    nursery: trio.Nursery
    settings: ClientSettings
    #: Gives up on a node the other nodes find dead (``_nodewatch``).
    watch: NodeWatch
    #: Where a node said a log's sequencer runs (REDIRECTED).
    _hint: dict[int, int] = attrs.field(init=False, factory=dict)
    #: Each log's producer numbering, with idempotent appends.
    _producers: dict[int, LogProducer] = attrs.field(init=False, factory=dict)
    #: APPENDs out to each node (``appends_in_flight_per_node``).
    _windows: dict[int, trio.Semaphore] = attrs.field(init=False, factory=dict)
    #: Each node's outbox of APPENDs that leave together (``_append_mux``).
    _muxes: dict[int, NodeMux] = attrs.field(init=False, factory=dict)

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
        # The body is packed (and compressed) once, with its checksum, and
        # travels unchanged to every node that stores it and every reader.
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
        with trio.move_on_at(deadline):
            while True:
                if first is not None:
                    (node, (reply, last), acks_then), first = first, None
                else:
                    node, reply, last, acks_then = await self._one(log_id, batch, again, producer)
                if node is None:
                    self._hint.pop(log_id, None)  # no live node can take it: no hint holds
                else:
                    again = True
                if reply is not None and reply.status != Status.OK:
                    last = f"{Status(reply.status).name}: {reply.message}"
                hopeless = (
                    number is None or producer is None or producer.hopeless(*number, acks_then)
                )
                # The decision is the pure core's (``_append_next``); the
                # routing, refreshes and waits are this loop's.
                step = after_reply(reply, hopeless)
                match step:
                    case Done(lsn):
                        return lsn
                    case Follow(to):
                        assert node is not None
                        if self._follow(log_id, node, to, redirected_by):
                            continue
                    case CheckLog():
                        await self.view.refresh()
                        if self.view.log_attributes(log_id) is None:
                            raise NotFoundError(f"log {log_id} does not exist")
                    case Fail(error):
                        raise error
                    case Settle():
                        assert producer is not None
                        await producer.settle()  # an earlier batch is out: once in, this follows
                        continue
                    case Pause():
                        pass
                    case _:
                        assert_never(step)
                with contextlib.suppress(LogstrandError):
                    await self.view.refresh()
                await trio.sleep(backoff * (0.5 + _JITTER.random()))
                backoff = min(backoff * 2, 0.5)
        raise TransientError(
            f"append to log {log_id} timed out after {self.settings.append_timeout_s} s ({last})",
            Status.TIMEDOUT,
        )

    async def _one(
        self, log_id: int, batch: PackedBatch, again: bool, producer: LogProducer | None
    ) -> tuple[int | None, AppendReply | None, str, int]:
        """One attempt of ``_retry``: (node, reply, why none, the producer's
        acknowledgements before it); node None when no node can take it."""
        node = self._route(log_id)
        if node is None:
            return None, None, "no live node can run the sequencer", 0
        acks_then = producer.acks if producer is not None else 0
        reply, last = await self._try(node, log_id, batch, again)
        return node, reply, last, acks_then

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

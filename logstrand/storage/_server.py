"""A node's server: accept (within the connection bounds), handshake (TLS and
the peer's principal), and one dispatch table.

Every accepted connection gets a writer task and a receive loop that hands
each message, in order, to the handler registered for its type.  A message
with no handler has no meaning on this side of a connection and is ignored.

Rules:

1. Handlers are registered once, at start, by the parts of the node
   (``register``); the table is the whole of what a node answers.
2. Before a handler runs, the ``Guard`` checks the message: may the peer's
   principal send it, and does it make sense (``_admission``)?  A refused
   request is answered with ``ErrorReply`` (a read stream with a final
   ``ReadRecords``) and the connection goes on.
3. One place catches a handler's failure: an expected error (a
   ``LogstrandError``) is answered with ``ErrorReply`` when the message was a
   request, and the connection goes on; anything else is a bug: it is logged
   with its traceback, answered the same way, and ends that connection only.
   No input ends the node.
4. What the node takes in is bounded (``net._intake``): each connection's
   unanswered requests, the bytes held for all clients together and for all
   other nodes together (two pools: clients can never hold up the STOREs
   their appends wait for), and in secure mode each user's connections and
   bytes.  A connection over a bound is not read until it is under again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import resource
import socket
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import LogstrandError, Status
from ..net import (
    PEER_INTAKE,
    Budget,
    ConnLimits,
    Intake,
    IntakeLimits,
    SendBudget,
    serve_connection,
)
from ..wire import (
    ACCESS,
    ErrorReply,
    Hello,
    ReadRecords,
    ReleaseMany,
    StartRead,
    Store,
    StoreMany,
    StoreReply,
)

if TYPE_CHECKING:
    import ssl
    from collections.abc import Awaitable, Callable

    from ..net import Connection
    from ._guard import Guard
    from ._metrics import NodeMetrics
    from ._options import NodeOptions

    Handler = Callable[[Connection, Any], Awaitable[None]]

_log = logging.getLogger("logstrand.node")


#: Messages of one connection whose checks wait on the epoch store at once
#: (past this, the next one is checked in line, and reading waits).
ASIDE_MAX = 1024


class _Aside:
    """A connection's messages being checked beside its reading."""

    __slots__ = ("nursery", "running")

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.running = 0


class Server:
    def __init__(
        self,
        node_id: int,
        cluster: str,
        *,
        guard: Guard,
        options: NodeOptions,
        metrics: NodeMetrics,
        ssl_context: ssl.SSLContext | None = None,
        on_closed: Callable[[Connection], None],
        busy: Callable[[Connection], bool],
    ) -> None:
        self.node_id = node_id
        self.cluster = cluster
        self.guard = guard
        self.options = options
        self.metrics = metrics
        self.ssl_context = ssl_context
        self.on_closed = on_closed
        self.busy = busy
        self.limits = ConnLimits(
            send_queue_bytes=options.send_queue_bytes,
            send_stall_s=options.send_stall_s,
            handshake_s=options.handshake_s,
            idle_s=options.idle_s,
        )
        self.budget = SendBudget(options.send_budget_bytes)
        self.intake_limits = IntakeLimits(
            requests_max=options.requests_per_connection,
            request_bytes_max=options.request_bytes_per_connection,
            frame_min_rate=options.frame_min_rate,
        )
        #: What clients, and other nodes, have sent that the node holds.
        self.client_pool = Budget(options.receive_budget)
        self.peer_pool = Budget(options.node_receive_budget)
        self._users: dict[str, Budget] = {}
        self._per_user: dict[str, int] = {}
        self._handlers: dict[type, Handler] = {}
        self._open = 0
        self._per_peer: dict[str, int] = {}

    def register(self, message_type: type, handler: Handler) -> None:
        assert message_type not in self._handlers, f"{message_type.__name__} handled twice"
        # Who may send it is declared with the message (``wire.message``).
        assert message_type in ACCESS, f"{message_type.__name__} is not a request"
        self._handlers[message_type] = handler

    async def serve(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    trio.serve_listeners, self._handle_stream, listeners, handler_nursery=nursery
                )
            )
            task_status.started()

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        try:
            address = stream.socket.getpeername()[0]
        except OSError:
            await stream.aclose()
            return
        opts = self.options
        if self._open >= opts.connections_max:
            self.metrics.connections_refused.labels("limit").inc()
            return await _drop(stream)
        if self._per_peer.get(address, 0) >= opts.connections_per_peer_max:
            self.metrics.connections_refused.labels("per_peer_limit").inc()
            return await _drop(stream)
        self._open += 1
        self._per_peer[address] = self._per_peer.get(address, 0) + 1
        self.metrics.connections.set(self._open)
        try:
            await self._serve_stream(stream, address)
        finally:
            self._open -= 1
            left = self._per_peer[address] - 1
            if left:
                self._per_peer[address] = left
            else:
                del self._per_peer[address]
            self.metrics.connections.set(self._open)

    async def _serve_stream(self, stream: trio.SocketStream, address: str) -> None:
        users = self._per_user
        counted: list[str] = []

        async def authenticate(hello: Hello, identity: tuple[str, str] | None) -> Any:
            # The guard says who the peer is; a user already at its number of
            # connections is refused here, in the HelloAck, with the reason.
            got = await self.guard.authenticate(hello, identity)
            if self.ssl_context is None or isinstance(got, tuple) or got.kind != "user":
                return got
            name = str(got.name)
            limit = self.options.connections_per_user_max
            if users.get(name, 0) >= limit:
                self.metrics.connections_refused.labels("per_user_limit").inc()
                _log.warning(
                    "node %d: user %s has %d connections open: refused one more from %s",
                    self.node_id,
                    name,
                    users[name],
                    address,
                )
                return Status.OVERLOADED, f"user {name} has {limit} connections open"
            users[name] = users.get(name, 0) + 1
            counted.append(name)
            return got

        try:
            conn = await serve_connection(
                stream,
                cluster=self.cluster,
                node_id=self.node_id,
                ssl_context=self.ssl_context,
                authenticate=authenticate,
                limits=self.limits,
                peer=address,
                budget=self.budget,
            )
            if conn is not None:
                await self._serve_conn(conn, counted[0] if counted else None)
        finally:
            for name in counted:
                left = users[name] - 1
                if left:
                    users[name] = left
                else:
                    del users[name]
                    self._users.pop(name, None)

    async def _serve_conn(self, conn: Connection, user: str | None) -> None:
        peer = conn.peer_node_id is not None and (user is None)
        budget = None
        if user is not None:
            budget = self._users.get(user)
            if budget is None:
                budget = self._users[user] = Budget(self.options.user_bytes)
        limits = attrs.evolve(PEER_INTAKE, frame_min_rate=self.intake_limits.frame_min_rate)
        conn.intake = Intake(
            limits if peer else self.intake_limits,
            self.peer_pool if peer else self.client_pool,
            budget,
            on_abandoned=self.metrics.requests_abandoned.inc,
        )
        try:
            async with trio.open_nursery() as nursery:
                conn.attach(nursery.cancel_scope)
                nursery.start_soon(conn.writer)
                aside = _Aside(nursery)
                await conn.receive_messages(
                    functools.partial(self._dispatch, conn, aside),
                    busy=functools.partial(self._busy, conn),
                )
                nursery.cancel_scope.cancel()
        finally:
            if conn.cut_reason is not None:
                self.metrics.connections_cut.inc()
            self.on_closed(conn)
            await conn.aclose()

    def _busy(self, conn: Connection) -> bool:
        """Not idle, only quiet: another node (they are few, and a cut link
        could lose a STORE in flight), a connection with a read stream, or
        one whose request is being worked on (``Connection.working``)."""
        return conn.peer_node_id is not None or conn.working > 0 or self.busy(conn)

    async def _dispatch(self, conn: Connection, aside: _Aside, msg: Any) -> None:
        kind = type(msg)
        if kind is Store and self.guard.passes(conn.principal, msg):
            # The write path's STOREs, nearly all of a node's messages: one
            # admission check, not ``must_read``'s and then ``check``'s.
            await self._handle(conn, self._handlers[Store], msg, checked=True)
            return
        if kind is StoreMany or kind is ReleaseMany:
            # Many logs' STOREs or RELEASEs: each entry as if it came alone,
            # in order, with the checks and the answer a single one gets.
            for one in msg.stores() if kind is StoreMany else msg.releases():
                await self._dispatch(conn, aside, one)
            return
        handler = self._handlers.get(kind)
        if handler is None:
            if conn.intake is not None:
                conn.intake.unanswered(msg)  # nothing here answers it
            return
        if aside.running < ASIDE_MAX and self.guard.must_read(msg):
            # Its check reads the epoch store (a STORE of a log's first epoch
            # this node has not seen yet): the connection goes on reading
            # meanwhile, instead of every STORE behind it waiting a read each.
            aside.running += 1
            aside.nursery.start_soon(self._aside, conn, aside, handler, msg)
            return
        await self._handle(conn, handler, msg)

    async def _aside(self, conn: Connection, aside: _Aside, handler: Any, msg: Any) -> None:
        try:
            await self._handle(conn, handler, msg)
        finally:
            aside.running -= 1

    async def _handle(
        self, conn: Connection, handler: Any, msg: Any, *, checked: bool = False
    ) -> None:
        """``handler`` for ``msg``, after the guard's checks (``checked``:
        the caller saw it pass them)."""
        try:
            if not checked:
                refused = await self.guard.check(conn.principal, msg)
                if refused is not None:
                    status, why = refused
                    name = type(msg).__name__
                    _log.info("node %d: refused %s from %s: %s", self.node_id, name, conn.peer, why)
                    await self._answer(conn, msg, status, why)
                    return
            await handler(conn, msg)
        except LogstrandError as exc:
            _log.warning(
                "node %d: %s from %s: %s", self.node_id, type(msg).__name__, conn.peer, exc
            )
            await self._answer(conn, msg, exc.status, str(exc))
        except Exception as exc:
            _log.exception(
                "node %d: %s from %s failed", self.node_id, type(msg).__name__, conn.peer
            )
            await self._answer(conn, msg, Status.FAILED, f"the node failed: {exc!r}")
            conn.cut("a handler failed")

    async def _answer(self, conn: Connection, msg: Any, status: Status, text: str) -> None:
        if conn.closed:
            return
        if isinstance(msg, StartRead):
            reply = ReadRecords(msg.stream_id, msg.generation, int(status), msg.start_lsn, 0)
            conn.offer(reply)
            return
        if isinstance(msg, Store):
            conn.offer(StoreReply(msg.store_id, msg.log_id, int(status), self.node_id))
            return
        request_id = getattr(msg, "request_id", None)
        if request_id is not None:
            conn.offer(ErrorReply(request_id, int(status), text[:4096]))


async def _drop(stream: trio.SocketStream) -> None:
    # Reset at once: no handshake, no lingering in TIME_WAIT on our side.
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
    await stream.aclose()


def raise_fd_limit() -> None:
    """Connections are bounded by ``connections_max``, not by a low default
    limit on open files, which would also starve RocksDB and peer links."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

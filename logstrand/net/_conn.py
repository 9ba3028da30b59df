"""Framed message connections over trio TCP streams, with or without TLS.

A ``Connection`` owns one stream.  Sending puts encoded frames into a queue
bounded in bytes that one writer task drains, joining every frame that is
waiting into a single ``send_all``: under load many small replies leave in one
syscall.  Receiving feeds bytes to the pure ``FrameDecoder``.

Every connection starts with ``Hello`` from the side that connected and
``HelloAck`` from the other; a version mismatch or a refused principal ends it.
Any bytes that do not decode end the connection that sent them, never the
process.

Bounds, each one of ``ConnLimits``:

* before ``Hello`` is accepted, a server reads one small frame
  (``hello_bytes_max``, few items) within ``handshake_s``;
* the send queue holds at most ``send_queue_bytes``, and all of a node's
  connections together at most their ``SendBudget``.  ``send`` waits for room
  (the peer is slow: its requests are no longer read either, so TCP pushes
  back on it), and cuts the connection when no room came within
  ``send_stall_s``; ``offer``, for code that must never wait (the group
  commit answering STOREs), cuts it at once when the queue is full;
* ``idle_s``: a server connection that sent nothing for that long and has
  nothing running (``busy``) is closed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import ssl
import struct
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import AccessDeniedError, ProtocolError, Status, TransientError
from ..security import peer_identity
from ..wire import (
    FRAME_BYTES_MAX_DEFAULT,
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    FrameDecoder,
    Hello,
    HelloAck,
    choose_version,
    decode_body,
    encode_frame,
)
from ._tls import TlsStream

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..security import Credentials

_log = logging.getLogger("logstrand.net")

RECEIVE_BYTES = 256 * 1024
HANDSHAKE_TIMEOUT_S = 3.0
#: One write joins queued frames up to this many bytes.
WRITE_BYTES_MAX = 4 * 1024 * 1024
#: What a server decodes of a requester's frame: its requests are short
#: arrays whose bulk is byte strings (see ``wire.count_items``).
REQUEST_ITEMS_MAX = 16_384


class SendBudget:
    """Bytes queued to send on all of a node's connections together.  A
    connection over its share waits (``send``) until its own queue drains;
    one with nothing queued may always send, so none starves."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


@attrs.frozen
class ConnLimits:
    send_queue_bytes: int = 64 * 1024 * 1024
    send_stall_s: float = 10.0
    handshake_s: float = HANDSHAKE_TIMEOUT_S
    hello_bytes_max: int = 4096
    idle_s: float | None = None
    items_max: int = REQUEST_ITEMS_MAX


DEFAULT_LIMITS = ConnLimits()


class Connection:
    """One framed connection.  ``send`` may wait while the peer is slow (bounded queue)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        peer: str = "",
        limits: ConnLimits = DEFAULT_LIMITS,
        decoder: FrameDecoder | None = None,
        budget: SendBudget | None = None,
    ) -> None:
        self.stream = stream
        self.budget = budget
        self.peer = peer
        self.limits = limits
        self.decoder = decoder or FrameDecoder()
        self._queue: collections.deque[bytes] = collections.deque()
        self.queued_bytes = 0
        self._wake = trio.Event()
        self._room = trio.Event()
        self._scope: trio.CancelScope | None = None
        self.closed = False
        self._stream_closed = False
        #: Why this side cut the connection (None: it was not cut).
        self.cut_reason: str | None = None
        self.peer_node_id: int | None = None
        #: Who the peer is (``security.Principal``), fixed at the handshake.
        self.principal: Any = None
        #: Held by whoever reads a large reply before queueing it (read
        #: streams): with ``wait_for_room`` first, a connection holds at most
        #: its queue and one reply being built, however many streams it has.
        self.bulk = trio.Lock()

    # -- sending -------------------------------------------------------------------

    def _put(self, frame: bytes) -> None:
        self._queue.append(frame)
        self.queued_bytes += len(frame)
        if self.budget is not None:
            self.budget.used += len(frame)
        self._wake.set()

    def _full(self, size: int, *, node_wide: bool = True) -> bool:
        if self.queued_bytes == 0:
            return False
        if self.queued_bytes + size > self.limits.send_queue_bytes:
            return True
        budget = self.budget
        return node_wide and budget is not None and budget.used + size > budget.limit

    async def send(self, msg: Any) -> None:
        """Queue a message, waiting (bounded) for room.

        Raises ``TransientError(PEER_CLOSED)`` once the connection is gone,
        and cuts it when the peer has not read for ``send_stall_s``.
        """
        frame = encode_frame(msg)
        if self._full(len(frame)) and not self.closed:
            with trio.move_on_after(self.limits.send_stall_s) as scope:
                while self._full(len(frame)) and not self.closed:
                    await self._room.wait()
            if scope.cancelled_caught:
                self.cut(f"its peer read nothing for {self.limits.send_stall_s:g} s")
        if self.closed:
            raise TransientError(f"connection to {self.peer} closed", Status.PEER_CLOSED)
        self._put(frame)

    async def wait_for_room(self) -> None:
        """Wait (bounded by ``send_stall_s``, then cut) until the queue is below its limit."""
        if not self._full(1) or self.closed:
            return
        with trio.move_on_after(self.limits.send_stall_s) as scope:
            while self._full(1) and not self.closed:
                await self._room.wait()
        if scope.cancelled_caught:
            self.cut(f"its peer read nothing for {self.limits.send_stall_s:g} s")
        if self.closed:
            raise TransientError(f"connection to {self.peer} closed", Status.PEER_CLOSED)

    def send_nowait(self, msg: Any) -> bool:
        """Queue a message if there is room; False when the queue is full or closed."""
        frame = encode_frame(msg)
        if self.closed or self._full(len(frame)):
            return False
        self._put(frame)
        return True

    def offer(self, msg: Any) -> bool:
        """Queue a message without ever waiting; a full queue means the peer
        does not read: the connection is cut.  False when not queued."""
        frame = encode_frame(msg)
        if self.closed:
            return False
        if self._full(len(frame), node_wide=False):
            self.cut(f"its peer let {self.queued_bytes} bytes of replies pile up")
            return False
        self._put(frame)
        return True

    def attach(self, scope: trio.CancelScope) -> None:
        """The scope of the tasks serving this connection: ``cut`` cancels it."""
        self._scope = scope

    def _release_queue(self) -> None:
        if self.budget is not None:
            self.budget.used -= self.queued_bytes
        self.queued_bytes = 0
        self._queue.clear()

    def cut(self, reason: str) -> None:
        """End the connection from any code, without waiting."""
        if self.closed:
            return
        _log.warning("closing the connection from %s: %s", self.peer, reason)
        self.cut_reason = reason
        self.closed = True
        self._wake.set()
        self._room.set()
        if self._scope is not None:
            self._scope.cancel()

    async def writer(self) -> None:
        """Drain the send queue into the stream until closed."""
        try:
            while True:
                while not self._queue and not self.closed:
                    self._wake = trio.Event()
                    await self._wake.wait()
                if self.closed:
                    return
                frames = [self._queue.popleft()]
                size = len(frames[0])
                while self._queue and size < WRITE_BYTES_MAX:
                    frames.append(self._queue.popleft())
                    size += len(frames[-1])
                self.queued_bytes -= size
                if self.budget is not None:
                    self.budget.used -= size
                room, self._room = self._room, trio.Event()
                room.set()
                await self.stream.send_all(b"".join(frames) if len(frames) > 1 else frames[0])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await self.aclose()

    # -- receiving -----------------------------------------------------------------

    async def receive_messages(
        self,
        handle: Callable[[Any], Awaitable[None]],
        *,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        """Read until EOF, calling ``handle`` for each message in order.

        A ProtocolError (garbage, oversized frame) ends the connection.  With
        ``limits.idle_s``, a connection that sent nothing for that long and is
        not ``busy()`` is closed.
        """
        idle_s = self.limits.idle_s
        try:
            while True:
                if idle_s is None:
                    data = await self.stream.receive_some(RECEIVE_BYTES)
                else:
                    data = None
                    with trio.move_on_after(idle_s):
                        data = await self.stream.receive_some(RECEIVE_BYTES)
                    if data is None:
                        if busy is not None and busy():
                            continue
                        self.cut(f"idle for {idle_s:g} s")
                        return
                if not data:
                    return
                self.decoder.feed(bytes(data))
                while (msg := self.decoder.next_message()) is not None:
                    await handle(msg)
        except ProtocolError as exc:
            _log.info("closing the connection from %s: %s", self.peer, exc)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        finally:
            await self.aclose()

    async def receive_one(self) -> Any:
        while (msg := self.decoder.next_message()) is None:
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise TransientError(f"{self.peer} closed the connection", Status.PEER_CLOSED)
            self.decoder.feed(bytes(data))
        return msg

    async def aclose(self) -> None:
        if self._stream_closed:
            return
        self._stream_closed = self.closed = True
        self._release_queue()
        self._wake.set()
        self._room.set()
        with trio.CancelScope(shield=True):
            await _close(self.stream)


async def _close(stream: trio.abc.Stream) -> None:
    # A TLS close sends close_notify for at most 0.2 s (``TlsStream.aclose``).
    await stream.aclose()


def _tcp(stream: trio.SocketStream) -> None:
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def connect(
    host: str,
    port: int,
    *,
    cluster: str,
    node_id: int | None = None,
    credentials: Credentials | None = None,
    limits: ConnLimits = DEFAULT_LIMITS,
) -> Connection:
    """Open a connection and do the handshake (within ``HANDSHAKE_TIMEOUT_S``).

    Raises:
        TransientError: CONNFAILED when the peer cannot be reached or refuses us.
        AccessDeniedError: the node did not accept our credentials.
    """
    tcp: trio.SocketStream | None = None
    done = False
    ctx = credentials.ssl if credentials is not None else None
    token = credentials.token if credentials is not None else None
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            tcp = await trio.open_tcp_stream(host, port)
            _tcp(tcp)
            stream: trio.abc.Stream = tcp
            if ctx is not None:
                tls = TlsStream(tcp, ctx, server_side=False, server_hostname=host)
                await tls.do_handshake()
                stream = tls
            # Replies can be large (a directory, a digest): the full item budget.
            conn = Connection(stream, peer=f"{host}:{port}", limits=limits)
            hello = Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster, node_id, token)
            await stream.send_all(encode_frame(hello))
            ack = await conn.receive_one()
            done = True
    except (
        OSError,
        ssl.SSLError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        ProtocolError,
        TransientError,
    ) as exc:
        raise TransientError(f"cannot connect to {host}:{port}: {exc}", Status.CONNFAILED) from None
    finally:
        # Failed, timed out or cancelled half-way: never leak the socket.
        if not done and tcp is not None:
            tcp.socket.close()
    if not isinstance(ack, HelloAck) or ack.status != Status.OK:
        await conn.aclose()
        status = Status(ack.status) if isinstance(ack, HelloAck) else Status.BADMSG
        why = f": {ack.message}" if isinstance(ack, HelloAck) and ack.message else ""
        msg = f"{host}:{port} refused the handshake: {status.name}{why}"
        if status == Status.ACCESS:
            raise AccessDeniedError(msg)
        raise TransientError(msg, Status.CONNFAILED)
    conn.peer_node_id = ack.node_id
    return conn


async def serve_connection(
    stream: trio.SocketStream,
    *,
    cluster: str,
    node_id: int,
    ssl_context: ssl.SSLContext | None = None,
    authenticate: Callable[[Hello, tuple[str, str] | None], Awaitable[Any]] | None = None,
    limits: ConnLimits = DEFAULT_LIMITS,
    peer: str = "client",
    budget: SendBudget | None = None,
) -> Connection | None:
    """Server side of the handshake.  Returns the connection, or None if it failed.

    ``authenticate`` returns the peer's principal, or a ``(Status, reason)``
    pair to refuse it.
    """
    _tcp(stream)
    # Until Hello is accepted, only one small frame of few items is read.
    decoder = FrameDecoder(frame_bytes_max=limits.hello_bytes_max, items_max=64)
    conn: Connection | None = None
    try:
        with trio.fail_after(limits.handshake_s):
            wrapped: trio.abc.Stream = stream
            identity = None
            if ssl_context is not None:
                tls = TlsStream(stream, ssl_context, server_side=True)
                await tls.do_handshake()
                identity = peer_identity(tls.getpeercert())
                wrapped = tls
            conn = Connection(wrapped, peer=peer, limits=limits, decoder=decoder, budget=budget)
            hello = await conn.receive_one()
            if not isinstance(hello, Hello):
                raise ProtocolError("first message must be Hello")
            version = choose_version(hello.protocol_min, hello.protocol_max)
            reason = ""
            principal = None
            if hello.cluster != cluster:
                status, reason = Status.ACCESS, f"this node is of cluster {cluster!r}"
            elif version is None:
                status = Status.PROTONOSUPPORT
            else:
                status = Status.OK
                if authenticate is not None:
                    got = await authenticate(hello, identity)
                    if isinstance(got, tuple):
                        status, reason = got
                    else:
                        principal = got
            ack = HelloAck(int(status), version or 0, node_id, reason[:1024])
            await wrapped.send_all(encode_frame(ack))
            if status != Status.OK:
                await conn.aclose()
                return None
            conn.peer_node_id = hello.node_id
            conn.principal = principal
    except (
        ProtocolError,
        TransientError,
        ssl.SSLError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        OSError,
    ):
        if conn is not None:
            await conn.aclose()
        else:
            await _close(stream)
        return None
    decoder.frame_bytes_max = FRAME_BYTES_MAX_DEFAULT
    decoder.items_max = limits.items_max
    return conn


def handshake_sync(
    host: str,
    port: int,
    cluster: str,
    *,
    timeout_s: float = 2.0,
    ssl_context: ssl.SSLContext | None = None,
    token: str | None = None,
) -> bool:
    """Blocking check that a node answers the handshake (for launchers and tests).

    A node with TLS needs ``ssl_context`` (and ``token`` or a client
    certificate in the context) to answer OK.
    """
    try:
        with contextlib.ExitStack() as stack:
            s: socket.socket = stack.enter_context(
                socket.create_connection((host, port), timeout=timeout_s)
            )
            if ssl_context is not None:
                s = stack.enter_context(ssl_context.wrap_socket(s, server_hostname=host))
            hello = Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster, None, token)
            s.sendall(encode_frame(hello))
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                buf += chunk
            ack = decode_body(buf[4 : 4 + struct.unpack(">I", buf[:4])[0]])
            return isinstance(ack, HelloAck) and ack.status == Status.OK
    except (OSError, ProtocolError):
        return False

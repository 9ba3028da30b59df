"""Framed message connections over trio TCP streams.

A ``Connection`` owns one stream.  Sending puts encoded frames into a bounded
queue that one writer task drains, joining every frame that is waiting into a
single ``send_all``: under load many small replies leave in one syscall.
Receiving feeds bytes to the pure ``FrameDecoder``.

Every connection starts with ``Hello`` from the side that connected and
``HelloAck`` from the other; a version mismatch ends it.  Any bytes that do not
decode end the connection that sent them, never the process.
"""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING, Any

import trio

from ..errors import ProtocolError, Status, TransientError
from ..wire import (
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    FrameDecoder,
    Hello,
    HelloAck,
    choose_version,
    decode_body,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

RECEIVE_BYTES = 256 * 1024
SEND_QUEUE_FRAMES = 4096
HANDSHAKE_TIMEOUT_S = 3.0


class Connection:
    """One framed connection.  ``send`` may wait while the peer is slow (bounded queue)."""

    def __init__(self, stream: trio.SocketStream, *, peer: str = "") -> None:
        self.stream = stream
        self.peer = peer
        self.decoder = FrameDecoder()
        self._send_in, self._send_out = trio.open_memory_channel[bytes](SEND_QUEUE_FRAMES)
        self.closed = False
        self.peer_node_id: int | None = None

    async def send(self, msg: Any) -> None:
        """Queue a message.  Raises ``TransientError(PEER_CLOSED)`` once the connection is gone."""
        try:
            await self._send_in.send(encode_frame(msg))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise TransientError(f"connection to {self.peer} closed", Status.PEER_CLOSED) from None

    def send_nowait(self, msg: Any) -> bool:
        """Queue a message if there is room; False when the queue is full or closed."""
        try:
            self._send_in.send_nowait(encode_frame(msg))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            return False
        return True

    async def writer(self) -> None:
        """Drain the send queue into the stream until closed."""
        try:
            async for frame in self._send_out:
                frames = [frame]
                size = len(frame)
                while size < 4 * 1024 * 1024:
                    try:
                        frames.append(self._send_out.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    size += len(frames[-1])
                await self.stream.send_all(b"".join(frames) if len(frames) > 1 else frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await self.aclose()

    async def receive_messages(self, handle: Callable[[Any], Awaitable[None]]) -> None:
        """Read until EOF, calling ``handle`` for each message in order.

        A ProtocolError (garbage, oversized frame) ends the connection.
        """
        try:
            while True:
                data = await self.stream.receive_some(RECEIVE_BYTES)
                if not data:
                    return
                self.decoder.feed(data)
                while (msg := self.decoder.next_message()) is not None:
                    await handle(msg)
        except ProtocolError:
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
            self.decoder.feed(data)
        return msg

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._send_in.close()
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


async def connect(host: str, port: int, *, cluster: str, node_id: int | None = None) -> Connection:
    """Open a connection and do the handshake (within ``HANDSHAKE_TIMEOUT_S``).

    Raises:
        TransientError: CONNFAILED when the peer cannot be reached or refuses us.
    """
    stream: trio.SocketStream | None = None
    done = False
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            stream = await trio.open_tcp_stream(host, port)
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(stream, peer=f"{host}:{port}")
            await stream.send_all(
                encode_frame(Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster, node_id))
            )
            ack = await conn.receive_one()
            done = True
    except (
        OSError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        ProtocolError,
        TransientError,
    ) as exc:
        raise TransientError(f"cannot connect to {host}:{port}: {exc}", Status.CONNFAILED) from None
    finally:
        # Failed, timed out or cancelled half-way: never leak the socket.
        if not done and stream is not None:
            stream.socket.close()
    if not isinstance(ack, HelloAck) or ack.status != Status.OK:
        await stream.aclose()
        status = Status(ack.status) if isinstance(ack, HelloAck) else Status.BADMSG
        msg = f"{host}:{port} refused the handshake: {status.name}"
        raise TransientError(msg, Status.CONNFAILED)
    conn.peer_node_id = ack.node_id
    return conn


async def serve_connection(
    stream: trio.SocketStream,
    *,
    cluster: str,
    node_id: int,
    on_open: Callable[[Connection], Awaitable[None]],
) -> Connection | None:
    """Server side of the handshake.  Returns the connection, or None if it failed."""
    stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection(stream, peer="client")
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            hello = await conn.receive_one()
            if not isinstance(hello, Hello):
                raise ProtocolError("first message must be Hello")
            version = choose_version(hello.protocol_min, hello.protocol_max)
            if hello.cluster != cluster:
                status = Status.ACCESS
            elif version is None:
                status = Status.PROTONOSUPPORT
            else:
                status = Status.OK
            await stream.send_all(encode_frame(HelloAck(int(status), version or 0, node_id)))
            if status != Status.OK:
                await conn.aclose()
                return None
            conn.peer_node_id = hello.node_id
    except (ProtocolError, TransientError, trio.TooSlowError, trio.BrokenResourceError, OSError):
        await conn.aclose()
        return None
    await on_open(conn)
    return conn


def handshake_sync(host: str, port: int, cluster: str, *, timeout_s: float = 2.0) -> bool:
    """Blocking check that a node answers the handshake (for launchers and tests)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(encode_frame(Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster)))
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

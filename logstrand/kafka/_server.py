"""The Kafka front's listener: frames in, answers out in order.  A thin trio shell.

Rules
-----
1. A frame is a 4-byte size and the request.  A size over ``frame_max`` or
   below the 8 bytes of a header, bytes that do not decode, or an API the
   front does not serve end the connection (Kafka brokers do the same) and
   are logged; nothing else is touched and the node goes on.
2. Clients pipeline (librdkafka keeps up to five Produce requests out per
   connection), and Kafka promises that a connection's requests are
   handled in the order sent and answered in that order.  So each
   connection handles one request at a time, in order, while a writer
   sends the answers; the next request is read when one is done (Kafka's
   broker mutes the connection the same way).  Connections go side by side.
3. A request with acks=0 gets no answer (``Front.handle`` returns None).
4. A peer that stops reading holds only its own connection: answers wait in
   a bounded queue, and a peer that has not read for ``write_stall_s``
   while answers wait is cut off.
5. Memory is bounded across connections: the bytes of requests being read
   or handled share ``budget_bytes`` (reading waits past it), a request must
   arrive whole within ``frame_s`` of its size, and at most
   ``connections_max`` connections are open.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ._codec import KafkaDecodeError
from ._protocol import API_VERSIONS, UnsupportedRequest, decode_request, peek_header

if TYPE_CHECKING:
    import ssl

    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")
_SIZE = struct.Struct(">i")


class CloseConnection(Exception):
    """Raised by a front for a request that must end its connection (one
    before authentication, in secure mode): logged, no answer, closed."""


class Front(Protocol):
    """What the listener serves (``KafkaFront``)."""

    served: dict[int, tuple[int, int]]

    async def handle(self, request: Request) -> bytes | None: ...

    def unsupported(self, exc: UnsupportedRequest) -> bytes | None: ...


@attrs.frozen
class Limits:
    #: The largest request taken (Kafka's socket.request.max.bytes is 100 MiB).
    frame_max: int = 100 * 1024 * 1024
    #: Answers of a connection waiting to be written; reading waits past it.
    in_flight_max: int = 32
    #: A connection whose answers wait this long unread is closed.
    write_stall_s: float = 60.0
    #: A connection that sends nothing for this long is closed (Kafka's
    #: connections.max.idle.ms is 10 minutes).
    idle_s: float = 600.0
    #: A request must arrive whole this long after its first bytes (a peer
    #: that trickles a frame holds its bytes of the budget, not forever).
    frame_s: float = 60.0
    #: Bytes of requests being read or handled, over every connection: past
    #: it, reading waits (one request alone may always go).
    budget_bytes: int = 256 * 1024 * 1024
    #: Connections at once; more are closed as they come.
    connections_max: int = 10_000


class _Budget:
    """Bytes of requests in hand, bounded (``Limits.budget_bytes``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = trio.Event()

    async def take(self, n: int) -> None:
        while self.used and self.used + n > self.limit:
            await self._freed.wait()
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n
        self._freed.set()
        self._freed = trio.Event()


class _Connection:
    def __init__(
        self, stream: trio.abc.Stream, front: Front, limits: Limits, peer: str, budget: _Budget
    ) -> None:
        self.budget = budget
        self.stream = stream
        self.front = front
        self.limits = limits
        self.peer = peer
        self.slots = trio.Semaphore(limits.in_flight_max)
        #: Answers in request order: each an event and, once set, the bytes.
        self.order: deque[list[Any]] = deque()
        self.ready = trio.Event()
        #: SASL: the user authenticated (None: none yet), the mechanism of a
        #: handshake, and a SCRAM exchange under way (``_auth``).
        self.user: str | None = None
        self.sasl: str | None = None
        self.scram: Any = None

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:

            async def writer() -> None:
                # The writer stops at an answer that cannot be given (a failed
                # or refused request): the connection ends there.
                try:
                    await self._writer()
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(writer)
            try:
                await self._reader()
            finally:
                nursery.cancel_scope.cancel()

    async def _read_exactly(self, n: int, buf: bytearray) -> bool:
        while len(buf) < n:
            with trio.move_on_after(self.limits.idle_s) as scope:
                chunk = await self.stream.receive_some(max(65536, n - len(buf)))
            if scope.cancelled_caught or not chunk:
                return False
            buf += chunk
        return True

    async def _reader(self) -> None:
        buf = bytearray()
        while True:
            if not await self._read_exactly(4, buf):
                return
            (size,) = _SIZE.unpack_from(buf)
            if not 8 <= size <= self.limits.frame_max:
                _log.warning("kafka: %s sent a frame of %d bytes; closing", self.peer, size)
                return
            await self.slots.acquire()
            await self.budget.take(size)
            whole = False
            with trio.move_on_after(self.limits.frame_s) as scope:
                whole = await self._read_exactly(4 + size, buf)
            if not whole:
                self.budget.give(size)
                if scope.cancelled_caught:
                    _log.warning("kafka: %s sent a frame too slowly; closing", self.peer)
                return
            frame = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            slot: list[Any] = [trio.Event(), None]
            self.order.append(slot)
            try:
                request = decode_request(frame, self.front.served, self)
            except UnsupportedRequest as exc:
                self.budget.give(size)
                answer = self.front.unsupported(exc)
                if answer is None:
                    _log.warning("kafka: %s: %s; closing", self.peer, exc)
                    return
                self._finish(slot, answer)
                continue
            except KafkaDecodeError as exc:
                self.budget.give(size)
                key, version, _ = peek_header(frame)
                _log.warning(
                    "kafka: %s sent a bad request (%d v%d): %s; it starts %s",
                    self.peer,
                    key,
                    version,
                    exc,
                    frame[:256].hex(),
                )
                return
            # One request at a time per connection, as a Kafka broker does:
            # Produce requests of one connection are appended in the order
            # sent (handled side by side, trio's scheduler could reorder two
            # appends to one partition).  Other connections go on meanwhile.
            await self._answer(request, slot, size)

    async def _answer(self, request: Request, slot: list[Any], size: int) -> None:
        try:
            answer = await self.front.handle(request)
        except CloseConnection as exc:
            _log.warning("kafka: %s: %s; closing", self.peer, exc)
            answer = b""
            slot.append("refused")
        except Exception:
            _log.exception("kafka: %s: %s v%d failed", self.peer, request.api_key, request.version)
            answer = b""  # nothing sent; the connection is closed below
            slot.append("failed")
        finally:
            self.budget.give(size)
        self._finish(slot, answer)

    def _finish(self, slot: list[Any], answer: bytes | None) -> None:
        slot[1] = answer
        slot[0].set()
        self.ready.set()

    async def _writer(self) -> None:
        while True:
            while not (self.order and self.order[0][0].is_set()):
                self.ready = trio.Event()
                await self.ready.wait()
            out = []
            while self.order and self.order[0][0].is_set():
                slot = self.order.popleft()
                self.slots.release()
                if len(slot) > 2:  # the handler failed: what follows cannot be answered
                    return
                if slot[1] is not None:
                    out.append(slot[1])
            if out:
                with trio.move_on_after(self.limits.write_stall_s) as scope:
                    await self.stream.send_all(b"".join(out))
                if scope.cancelled_caught:
                    _log.warning("kafka: %s has not read its answers; closing", self.peer)
                    return


def _gone(exc: BaseException) -> bool:
    """Whether ``exc`` (or every exception of a group) says the peer went away."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_gone(e) for e in exc.exceptions)
    return isinstance(
        exc, (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError)
    )


async def serve_kafka(
    front: Front,
    host: str,
    port: int,
    limits: Limits | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``front`` on ``host:port`` until cancelled; started with the port
    bound.  With ``ssl_context``, over TLS (the handshake within ``frame_s``)."""
    lim = limits or Limits()
    listeners = await trio.open_tcp_listeners(port, host=host)
    budget = _Budget(lim.budget_bytes)
    open_now = [0]

    async def one(stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            await trio.aclose_forcefully(stream)
            return
        if open_now[0] >= lim.connections_max:
            _log.warning("kafka: %d connections open: %s refused", open_now[0], peer)
            await trio.aclose_forcefully(stream)
            return
        open_now[0] += 1
        try:
            conn: trio.abc.Stream = stream
            if ssl_context is not None:
                conn = trio.SSLStream(stream, ssl_context, server_side=True)
                with trio.fail_after(lim.frame_s):
                    await conn.do_handshake()
            await _Connection(conn, front, lim, peer, budget).run()
        except Exception as exc:  # nothing a peer does ends the node
            if not _gone(exc):
                _log.exception("kafka: %s: connection failed", peer)
        finally:
            open_now[0] -= 1
            await trio.aclose_forcefully(stream)

    bound = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        await trio.serve_listeners(one, listeners, handler_nursery=nursery)


__all__ = ["API_VERSIONS", "CloseConnection", "Front", "Limits", "serve_kafka"]

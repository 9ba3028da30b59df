"""The Kafka front's listener: frames in, answers out in order.  A thin trio shell.

Rules
-----
1. A frame is a 4-byte size and the request.  A size over ``frame_max`` (or,
   on a connection that has not authenticated in secure mode, over
   ``unauthenticated_frame_max``: Kafka's ``sasl.server.max.receive.size``)
   or below the 8 bytes of a header, bytes that do not decode, or an API
   the front does not serve end the connection (Kafka brokers do the same)
   and are logged; nothing else is touched and the node goes on.  Before
   authentication only ApiVersions and SASL are decoded at all: anything
   else ends the connection on its header.
2. Clients pipeline (librdkafka keeps up to five Produce requests out per
   connection), and Kafka promises that a connection's requests are
   handled in the order sent and answered in that order.  So each
   connection handles one request at a time, in order, while a writer
   sends the answers; the next request is read when one is done (Kafka's
   broker mutes the connection the same way).  Connections go side by side.
3. A request with acks=0 gets no answer (``Front.handle`` returns None).  A
   request after which the connection must end (a failed login) is
   answered, then the connection closes (``conn.closing``).
4. A peer that stops reading holds only its own connection: answers wait in
   a bounded queue, and a peer that has not read for ``write_stall_s``
   while answers wait is cut off.
5. Memory is bounded across connections by two budgets.  ``budget_bytes``
   counts the bytes of frames, as they arrive, never as a size claims (a
   size is a promise: three connections that only sent sizes once held the
   whole budget).  Each read reserves what it may read first; a connection
   holding nothing may always read ``allowance`` bytes, so small requests
   go on while large ones wait.  ``decoded_bytes`` counts what decoding
   makes: ``ITEM_BYTES`` per array item (``_codec``), at most ``items_max``
   a request.  A frame is decoded with as many items as that budget has
   room for; one with more waits until some are given back and is decoded
   again (a request alone may always go).  The two are apart so that
   requests decoded, which only ever finish, never wait on frames being
   read, which may wait on them.  Everything a request holds is given back
   once it is answered.
6. A frame must be whole within ``frame_grace_s`` plus its size at
   ``frame_min_rate`` of its first byte, and each read within a frame must
   bring something within ``frame_grace_s``: a peer that stops, or
   trickles, holds its bytes of the budget for seconds, not for ever.  The
   clock runs while the connection waits for budget, so connections whose
   frames hold the budget cannot wait on each other for ever.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..net import Budget
from ._codec import ITEM_BYTES, Items, KafkaDecodeError, TooManyItems
from ._protocol import (
    API_VERSIONS,
    BEFORE_AUTH,
    UnsupportedRequest,
    decode_request,
    peek_header,
)

if TYPE_CHECKING:
    import ssl

    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")
_SIZE = struct.Struct(">i")
KiB, MiB = 1024, 1024 * 1024


class CloseConnection(Exception):
    """Raised by a front for a request that must end its connection (one
    before authentication, in secure mode): logged, no answer, closed."""


class Front(Protocol):
    """What the listener serves (``KafkaFront``)."""

    served: dict[int, tuple[int, int]]
    #: Whether connections must authenticate (SASL) before anything else.
    secure: bool

    async def handle(self, request: Request) -> bytes | None: ...

    async def raw_sasl(self, conn: Any, data: bytes) -> bytes | None: ...

    def unsupported(self, exc: UnsupportedRequest) -> bytes | None: ...


@attrs.frozen
class Limits:
    #: The largest request taken (Kafka's socket.request.max.bytes is 100 MiB).
    frame_max: int = 100 * MiB
    #: The largest before a connection authenticated, in secure mode
    #: (Kafka's sasl.server.max.receive.size).
    unauthenticated_frame_max: int = 512 * KiB
    #: Answers of a connection waiting to be written; reading waits past it.
    in_flight_max: int = 32
    #: A connection whose answers wait this long unread is closed.
    write_stall_s: float = 60.0
    #: A connection that sends nothing for this long between requests is
    #: closed (Kafka's connections.max.idle.ms is 10 minutes).
    idle_s: float = 600.0
    #: A frame must arrive within this plus its size at ``frame_min_rate``
    #: bytes a second, each read of it within this.
    frame_grace_s: float = 10.0
    frame_min_rate: int = MiB
    #: Bytes of frames held over every connection (coming in, or a request in
    #: hand).  Past it, reading waits.
    budget_bytes: int = 256 * MiB
    #: What a connection holding nothing may always read, budget or not.
    allowance: int = 64 * KiB
    #: What the requests in hand may have been decoded into, over every
    #: connection, at ``ITEM_BYTES`` an array item.
    decoded_bytes: int = 128 * MiB
    #: Array items one request may decode into (a Fetch of 100,000
    #: partitions); more ends the connection.
    items_max: int = 100_000
    #: A request decoded only partly for want of ``decoded_bytes`` waits this
    #: long for room before its connection is cut.
    decode_wait_s: float = 30.0
    #: Connections at once; more are closed as they come.
    connections_max: int = 10_000

    def frame_deadline(self, started: float, size: int) -> float:
        return started + self.frame_grace_s + size / self.frame_min_rate


class _Cut(Exception):
    """The connection ends here; the message says why (logged)."""


class _Connection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        front: Front,
        limits: Limits,
        peer: str,
        budget: Budget,
        decoded: Budget,
    ) -> None:
        self.budget = budget
        self.decoded = decoded
        self.stream = stream
        self.front = front
        self.limits = limits
        self.peer = peer
        self.slots = trio.Semaphore(limits.in_flight_max)
        #: Answers in request order: each an event and, once set, the bytes.
        self.order: deque[list[Any]] = deque()
        self.ready = trio.Event()
        self.written = trio.Event()
        #: Bytes read and not yet a request, all of them counted in the budget.
        self.buf = bytearray()
        #: Bytes of ``budget`` this connection holds: ``buf`` and the frame of
        #: the request in hand (its items are held in ``decoded``).
        self.held = 0
        #: SASL: the user authenticated (None: none yet), the mechanism of a
        #: handshake, and a SCRAM exchange under way (``_auth``).
        self.user: str | None = None
        self.sasl: str | None = None
        self.scram: Any = None
        #: After a SaslHandshake v0: the next frames are raw SASL messages.
        self.raw_sasl = False
        #: Set by the front: answer the request in hand, then close.
        self.closing = False

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:

            async def writer() -> None:
                # The writer stops at an answer that cannot be given (a failed
                # or refused request): the connection ends there.
                try:
                    await self._writer()
                finally:
                    self.written.set()
                    nursery.cancel_scope.cancel()

            nursery.start_soon(writer)
            try:
                await self._reader()
            except _Cut as exc:
                _log.warning("kafka: %s %s; closing", self.peer, exc)
            finally:
                if self.closing:  # the last answer goes out first
                    with trio.move_on_after(self.limits.write_stall_s):
                        await self.written.wait()
                nursery.cancel_scope.cancel()
                self._give(self.held)

    # -- memory -----------------------------------------------------------------------

    def _grant(self, want: int) -> int:
        """Reserve up to ``want`` bytes of the budget now (0: none to be had)."""
        room = self.budget.limit - self.budget.used
        if self.held == 0:
            room = max(room, self.limits.allowance)
        n = min(want, room)
        if n > 0:
            self.budget.take(n)
            self.held += n
        return max(n, 0)

    def _give(self, n: int) -> None:
        self.held -= n
        self.budget.give(n)

    async def _wait_budget(self, deadline: float, what: str) -> None:
        with trio.move_on_at(deadline):
            await self.budget.wait_freed()
            return
        raise _Cut(f"waited for memory to read {what} past its deadline")

    # -- reading ----------------------------------------------------------------------

    async def _fill(self, need: int, deadline: float, stall_s: float) -> bool:
        """Read until ``buf`` holds ``need`` bytes, reserving each read's bytes
        first; False when the peer closed, or went quiet past ``deadline``,
        between requests (nothing of a frame in ``buf``)."""
        while len(self.buf) < need:
            n = self._grant(max(need - len(self.buf), self.limits.allowance))
            if n == 0:
                await self._wait_budget(deadline, f"a frame of {need - 4} bytes")
                continue
            chunk: bytes | bytearray | None = None
            with trio.move_on_at(min(deadline, trio.current_time() + stall_s)):
                chunk = await self.stream.receive_some(n)
            self._give(n - len(chunk or b""))
            if not chunk:
                if not self.buf:
                    return False
                what = "closed its connection" if chunk == b"" else "stopped sending"
                raise _Cut(f"{what} after {len(self.buf)} of the {need} bytes of a frame")
            self.buf += chunk
        return True

    async def _frame(self) -> bytes | None:
        """The next request frame (without its size), its bytes still held;
        None at an end of stream between requests."""
        lim = self.limits
        idle = trio.current_time() + lim.idle_s
        if not await self._fill(4, idle, lim.idle_s):
            return None
        started = trio.current_time()
        (size,) = _SIZE.unpack_from(self.buf)
        top = lim.frame_max
        if self.front.secure and self.user is None:
            top = min(top, lim.unauthenticated_frame_max)
        # A raw SASL message has no Kafka header: a PLAIN one can be short.
        if not (1 if self.raw_sasl else 8) <= size <= top:
            raise _Cut(f"sent a frame of {size} bytes (at most {top} here)")
        deadline = lim.frame_deadline(started, size)
        await self._fill(4 + size, deadline, lim.frame_grace_s)  # ``buf`` holds 4 already
        with memoryview(self.buf) as view:  # one copy of the frame, not two
            frame = bytes(view[4 : 4 + size])
        del self.buf[: 4 + size]
        return frame

    async def _reader(self) -> None:
        while True:
            frame = await self._frame()
            if frame is None:
                return
            # The bytes read past this frame stay held for the next one.
            request_bytes = self.held - len(self.buf)
            await self.slots.acquire()
            slot: list[Any] = [trio.Event(), None]
            self.order.append(slot)
            if self.raw_sasl:
                answer = await self.front.raw_sasl(self, frame)
                self._give(request_bytes)
                if answer is None:  # a failed login: no word, the connection ends
                    slot.append("last")
                    self._finish(slot, None)
                    return
                self._finish(slot, _SIZE.pack(len(answer)) + answer)
                continue
            request, items_bytes = await self._decode(frame)
            if request is None:
                self._give(request_bytes)
                return
            if isinstance(request, bytes):  # an API not served, answered as such
                self._give(request_bytes)
                self._finish(slot, request)
                continue
            # One request at a time per connection, as a Kafka broker does:
            # Produce requests of one connection are appended in the order
            # sent (handled side by side, trio's scheduler could reorder two
            # appends to one partition).  Other connections go on meanwhile.
            try:
                await self._answer(request, slot)
            finally:
                self._give(request_bytes)
                self.decoded.give(items_bytes)
            if self.closing:
                return

    async def _decode(self, frame: bytes) -> tuple[Request | bytes | None, int]:
        """The request in ``frame`` and the bytes of ``decoded`` its items
        hold; (bytes, 0) for an API that is not served (its answer); (None,
        0) when the connection must end."""
        try:
            key, _, _ = peek_header(frame)
        except KafkaDecodeError as exc:
            _log.warning("kafka: %s sent a bad request: %s; closing", self.peer, exc)
            return None, 0
        if self.front.secure and self.user is None and key not in BEFORE_AUTH:
            _log.warning(
                "kafka: %s: API %d before SASL authentication (the front is in secure mode); "
                "closing",
                self.peer,
                key,
            )
            return None, 0
        lim, decoded = self.limits, self.decoded
        deadline = trio.current_time() + lim.decode_wait_s
        while True:
            # Decoding does not await: the items it may make are what the
            # budget has room for now (all it wants when nothing else holds
            # any), and it keeps what it used.
            room = (decoded.limit - decoded.used) // ITEM_BYTES
            allowed = lim.items_max if decoded.used == 0 else max(0, min(lim.items_max, room))
            items = Items(allowed)
            try:
                request = decode_request(frame, self.front.served, self, items=items)
            except TooManyItems as exc:
                if allowed == lim.items_max:
                    self._bad(frame, exc)
                    return None, 0
                with trio.move_on_at(deadline):
                    await decoded.wait_freed()  # a request in hand was answered
                    continue
                _log.warning("kafka: %s: no room to decode its request in time; closing", self.peer)
                return None, 0
            except UnsupportedRequest as exc:
                answer = self.front.unsupported(exc)
                if answer is None:
                    _log.warning("kafka: %s: %s; closing", self.peer, exc)
                return answer, 0
            except KafkaDecodeError as exc:
                self._bad(frame, exc)
                return None, 0
            kept = items.used * ITEM_BYTES
            decoded.take(kept)
            return request, kept

    def _bad(self, frame: bytes, exc: Exception) -> None:
        key, version, _ = peek_header(frame)
        _log.warning(
            "kafka: %s sent a bad request (%d v%d): %s; it starts %s; closing",
            self.peer,
            key,
            version,
            exc,
            frame[:64].hex(),
        )

    async def _answer(self, request: Request, slot: list[Any]) -> None:
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
        if self.closing and len(slot) == 2:
            slot.append("last")
        self._finish(slot, answer)

    def _finish(self, slot: list[Any], answer: bytes | None) -> None:
        slot[1] = answer
        slot[0].set()
        self.ready.set()

    # -- writing ----------------------------------------------------------------------

    async def _writer(self) -> None:
        while True:
            while not (self.order and self.order[0][0].is_set()):
                self.ready = trio.Event()
                await self.ready.wait()
            out, end = [], False
            while self.order and self.order[0][0].is_set():
                slot = self.order.popleft()
                self.slots.release()
                mark = slot[2] if len(slot) > 2 else None
                if mark in ("failed", "refused"):
                    end = True  # what follows cannot be answered: the connection ends
                    break
                if slot[1] is not None:
                    out.append(slot[1])
                if mark == "last":
                    end = True
                    break
            if out:
                with trio.move_on_after(self.limits.write_stall_s) as scope:
                    await self.stream.send_all(b"".join(out))
                if scope.cancelled_caught:
                    _log.warning("kafka: %s has not read its answers; closing", self.peer)
                    return
            if end:
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
    bound.  With ``ssl_context``, over TLS (the handshake within ``frame_grace_s``)."""
    lim = limits or Limits()
    listeners = await trio.open_tcp_listeners(port, host=host)
    budget, decoded = Budget(lim.budget_bytes), Budget(lim.decoded_bytes)
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
                with trio.fail_after(lim.frame_grace_s):
                    await conn.do_handshake()
            await _Connection(conn, front, lim, peer, budget, decoded).run()
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

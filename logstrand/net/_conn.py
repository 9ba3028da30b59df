"""Framed message connections over trio TCP streams, with or without TLS.

A ``Connection`` owns one stream.  Sending puts encoded frames into a queue
bounded in bytes that one writer task drains, joining every frame that is
waiting into a single ``send_all``: under load many small replies leave in one
syscall.  When nothing is queued and the writer is not writing, a frame on a
plain TCP stream leaves at once instead (``_write_now``): one non-blocking
write from the sending task, what does not fit queued for the writer.  A
message then costs no hop to the writer task, a turn of the event loop later
(a sequential append crossed eight such hops, about 230 us each on the
client's side: ``bench/single.py --trace``).  Receiving feeds bytes to the
pure ``FrameDecoder``.

Every connection starts with ``Hello`` from the side that connected and
``HelloAck`` from the other (``_handshake``); a version mismatch or a refused
principal ends it.  Any bytes that do not decode end the connection that sent
them, never the process.

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
  nothing running (``busy``) is closed;
* a server's connection has an ``Intake`` (``_intake``): what it takes in is
  bounded in requests, bytes and time, per connection, per pool and per user.
"""

from __future__ import annotations

import collections
import logging
import math
import os
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _trace
from ..errors import ProtocolError, Status, TransientError
from ..wire import (
    PROTOCOL_VERSION_MIN,
    FrameDecoder,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._intake import Intake

_log = logging.getLogger("logstrand.net")

RECEIVE_BYTES = 256 * 1024
HANDSHAKE_TIMEOUT_S = 3.0
#: One write joins queued frames up to this many bytes.
WRITE_BYTES_MAX = 4 * 1024 * 1024
#: Frames up to this size may leave at once from the sending task
#: (``_write_now``); a bigger one rarely fits the socket's buffer whole, and
#: what is left would be copied to be queued.
WRITE_NOW_BYTES_MAX = 256 * 1024
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
        #: The socket ``_write_now`` writes to (a plain TCP stream only: TLS
        #: must frame what it sends, so it goes through the writer).
        self._socket: trio.socket.SocketType | None = None
        if isinstance(stream, trio.SocketStream):
            self._socket = stream.socket
        #: The writer task is in ``send_all``: nothing may be written past it.
        self._writing = False
        self._wake = trio.Event()
        self._room = trio.Event()
        self._scope: trio.CancelScope | None = None
        self.closed = False
        self._stream_closed = False
        #: Why this side cut the connection (None: it was not cut).
        self.cut_reason: str | None = None
        self.peer_node_id: int | None = None
        #: The protocol version chosen at the handshake.
        self.protocol = PROTOCOL_VERSION_MIN
        #: Who the peer is (``security.Principal``), fixed at the handshake.
        self.principal: Any = None
        #: Held by whoever reads a large reply before queueing it (read
        #: streams): with ``wait_for_room`` first, a connection holds at most
        #: its queue and one reply being built, however many streams it has.
        self.bulk = trio.Lock()
        #: A server's bounds on what it takes in from this peer (``_intake``).
        self.intake: Intake | None = None
        #: Requests of this peer being worked on in the background (a
        #: compaction pass can take many minutes): while any are, the
        #: connection is quiet, not idle, and is not cut for idleness.
        self.working = 0

    # -- sending -------------------------------------------------------------------

    def _put(self, frame: bytes, msg: Any) -> None:
        if self.intake is not None:
            self.intake.settle(msg)
        if not self._queue and not self._writing and self._socket is not None:
            frame = self._write_now(frame)
            if not frame:
                return
        self._queue.append(frame)
        self.queued_bytes += len(frame)
        if self.budget is not None:
            self.budget.used += len(frame)
        self._wake.set()

    def _write_now(self, frame: bytes) -> bytes:
        """Write ``frame`` from the calling task, without waiting; what is
        left to queue (empty: all of it left).

        Only with nothing queued and the writer not writing, so frames keep
        their order.  A socket with no room (or a frame too big to try)
        leaves it all to the writer, which waits for room as before; an
        error too, which the writer meets and ends the connection with."""
        if len(frame) > WRITE_NOW_BYTES_MAX or self.closed or self._socket is None:
            return frame
        # Asked each time, not kept: a closed socket says -1, where a kept
        # number could by then name another connection's socket.
        fd = self._socket.fileno()
        if fd < 0:
            return frame
        try:
            # os.write on a socket is send(2) without flags; trio keeps the
            # socket non-blocking, and Python ignores SIGPIPE (an EPIPE
            # raises, and is left to the writer).
            n = os.write(fd, frame)
        except OSError:
            return frame
        if _trace.ON:
            _trace.mark("net.sent")
        return frame[n:]

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
        self._put(frame, msg)

    async def reply(self, msg: Any) -> bool:
        """Send the answer to a request of the peer's; False when the
        connection is gone (whoever asked went with it, and retries or gave
        up: there is no one to tell)."""
        try:
            await self.send(msg)
        except TransientError:  # PEER_CLOSED: the only failure of ``send``
            return False
        return True

    async def wait_for_room(self, below: int | None = None) -> None:
        """Wait (bounded by ``send_stall_s``, then cut) until the queue is
        below its limit, and below ``below`` bytes when given."""

        def full() -> bool:
            return self._full(1) or (below is not None and self.queued_bytes >= below)

        if not full() or self.closed:
            return
        with trio.move_on_after(self.limits.send_stall_s) as scope:
            while full() and not self.closed:
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
        self._put(frame, msg)
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
        self._put(frame, msg)
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
                self._writing = True
                try:
                    await self.stream.send_all(b"".join(frames) if len(frames) > 1 else frames[0])
                finally:
                    self._writing = False
                if _trace.ON:
                    _trace.mark("net.sent")
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
        not ``busy()`` is closed.  With an ``intake`` (a server's connection),
        reading waits for the connection's turn and for budget, and a frame
        that comes slower than the intake's minimum rate ends the connection
        (``_intake``).
        """
        try:
            await self._receive(handle, busy)
        except ProtocolError as exc:
            _log.info("closing the connection from %s: %s", self.peer, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            if self.intake is not None:
                self.intake.close()
            await self.aclose()

    async def _receive(
        self, handle: Callable[[Any], Awaitable[None]], busy: Callable[[], bool] | None
    ) -> None:
        idle_s = self.limits.idle_s
        intake = self.intake
        decoder = self.decoder
        queued = self._queued_frames
        frame: float | None = None  # when the frame being read began
        while True:
            # A frame begun must be in by its deadline, however long this
            # connection waits for its turn or for budget meanwhile.
            frame_due = math.inf
            if frame is not None and intake is not None:
                frame_due = intake.frame_deadline(frame, decoder.claimed_bytes())
            want = RECEIVE_BYTES
            if intake is not None:
                # The usual case: under every bound, nothing to wait for.
                got = intake.take(want) if intake.may_read(len(self._queue)) else 0
                if got:
                    want = got
                else:
                    with trio.move_on_at(frame_due):
                        await intake.wait_turn(queued)
                        want = await intake.reserve(want)
                    if trio.current_time() >= frame_due:
                        self._cut_slow_frame()
                        return
            deadline = math.inf if idle_s is None else trio.current_time() + idle_s
            deadline = min(deadline, frame_due)
            data = None
            with trio.move_on_at(deadline):
                data = await self.stream.receive_some(want)
            if data is None:
                if intake is not None:
                    intake.received(0, want)
                if frame is not None:
                    self._cut_slow_frame()
                    return
                if busy is not None and busy():
                    continue
                self.cut(f"idle for {idle_s:g} s")
                return
            if intake is not None:
                intake.received(len(data), want)
            if not data:
                return
            if _trace.ON:
                _trace.mark("net.received")
            decoder.feed(bytes(data))
            while (msg := decoder.next_message()) is not None:
                frame = None
                if intake is not None:
                    intake.decoded(msg, decoder.last_frame_bytes)
                await handle(msg)
                if intake is not None and not intake.may_read(len(self._queue)):
                    await intake.wait_turn(queued)
            if decoder.buffered_bytes and frame is None and intake is not None:
                frame = trio.current_time()

    def _cut_slow_frame(self) -> None:
        decoder = self.decoder
        self.cut(
            f"a frame of {decoder.claimed_bytes()} bytes came too slowly "
            f"({decoder.buffered_bytes} bytes in by its deadline)"
        )

    def _queued_frames(self) -> int:
        return len(self._queue)

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
            await close_stream(self.stream)


async def close_stream(stream: trio.abc.Stream) -> None:
    # A TLS close sends close_notify for at most 0.2 s (``TlsStream.aclose``).
    await stream.aclose()

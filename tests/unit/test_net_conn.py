"""``net.Connection``'s send bounds: per connection, node-wide, never-waiting offers."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from logstrand.errors import TransientError
from logstrand.net import Connection, ConnLimits, SendBudget
from logstrand.wire import ErrorReply, FrameDecoder, encode_frame

BIG = ErrorReply(1, 0, "x" * 1000)
SIZE = len(encode_frame(BIG))


def _conn(budget: SendBudget, queue: int = 10_000) -> Connection:
    local, _remote = trio.testing.lockstep_stream_pair()  # nobody reads the other end
    return Connection(
        local, limits=ConnLimits(send_queue_bytes=queue, send_stall_s=0.2), budget=budget
    )


async def test_the_node_wide_budget_throttles_then_cuts_the_connection_that_piles_up() -> None:
    budget = SendBudget(limit=3 * SIZE - 1)
    a, b = _conn(budget), _conn(budget)
    await a.send(BIG)
    await a.send(BIG)
    assert budget.used == 2 * SIZE
    await b.send(BIG)  # nothing queued on b yet: it may always send one
    assert budget.used == 3 * SIZE
    with pytest.raises(TransientError):
        await b.send(BIG)  # over the budget with something queued: waits, then cut
    assert b.closed
    assert b.cut_reason is not None
    await b.aclose()
    assert budget.used == 2 * SIZE  # b's queue given back
    # A reply from the group commit never waits; the budget does not cut it.
    assert a.offer(BIG)
    await a.aclose()
    assert budget.used == 0


async def test_offer_cuts_a_peer_whose_own_queue_is_full() -> None:
    conn = _conn(SendBudget(limit=1 << 30), queue=2 * SIZE)
    assert conn.offer(BIG)
    assert conn.offer(BIG)
    assert not conn.offer(BIG)
    assert conn.closed
    assert "pile up" in (conn.cut_reason or "")


async def _tcp_pair() -> tuple[trio.SocketStream, trio.socket.SocketType]:
    """A connected TCP pair on 127.0.0.1: a stream for the Connection, the
    other end's socket for the test to read."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    return trio.SocketStream(client), server


async def test_a_frame_leaves_at_once_when_nothing_waits_before_it() -> None:
    """With nothing queued, a frame is written by the task that sends it:
    the other end has it although no writer task ever ran (without
    ``_write_now`` it waited in the queue for the writer, a loop turn later)."""
    stream, other = await _tcp_pair()
    conn = Connection(stream)
    try:
        assert conn.send_nowait(BIG)
        assert conn.queued_bytes == 0
        got = b""
        with trio.fail_after(5):
            while len(got) < SIZE:
                got += await other.recv(1 << 16)
        assert got == encode_frame(BIG)
    finally:
        other.close()
        await conn.aclose()


async def test_frames_keep_their_order_across_writes_now_and_the_writer() -> None:
    """A peer that reads slowly fills the socket: frames written at once,
    the rest of one cut short, and frames queued behind it reach the other
    end whole and in order."""
    stream, other = await _tcp_pair()
    stream.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, 4096)
    conn = Connection(stream)
    sent = [ErrorReply(i, 0, "y" * (i % 3000)) for i in range(3000)]
    got: list[object] = []
    decoder = FrameDecoder()
    all_read = trio.Event()

    async def read_slowly() -> None:
        while len(got) < len(sent):
            await trio.sleep(0.001)
            data = await other.recv(8192)
            assert data, "closed early"
            decoder.feed(data)
            while (msg := decoder.next_message()) is not None:
                got.append(msg)
        all_read.set()

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.writer)
                nursery.start_soon(read_slowly)
                for msg in sent:
                    await conn.send(msg)
                    if msg.request_id % 7 == 0:
                        await trio.lowlevel.checkpoint()  # the writer may run between some
                await all_read.wait()
                nursery.cancel_scope.cancel()
        assert got == sent
    finally:
        other.close()
        await conn.aclose()

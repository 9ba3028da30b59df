"""``net.Connection``'s send bounds: per connection, node-wide, never-waiting offers."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from logstrand.errors import TransientError
from logstrand.net import Connection, ConnLimits, SendBudget
from logstrand.wire import ErrorReply, encode_frame

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

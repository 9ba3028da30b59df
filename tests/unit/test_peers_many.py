"""A node's outgoing STOREs and RELEASEs, many logs to a message
(``storage/_peers.py``), with fake links on trio's virtual clock: what
leaves for a peer of protocol 6 and of protocol 5, in what order, when a
burst of work ends, and what a STORE that cannot be sent is answered."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel
import trio.testing

from logstrand.batch import make_batch
from logstrand.errors import Status
from logstrand.storage._peers import BURST_WAIT_S, Peers
from logstrand.wire import (
    MANY_MAX,
    Release,
    ReleaseMany,
    Store,
    StoreMany,
    StoreReplies,
    StoreReply,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class FakeConn:
    def __init__(self, protocol: int) -> None:
        self.protocol = protocol


class FakeLink:
    def __init__(self, protocol: int) -> None:
        self.conn = FakeConn(protocol)
        self.sent: list[Any] = []

    async def send(self, msg: Any) -> None:
        await trio.lowlevel.checkpoint()
        self.sent.append(msg)

    def send_nowait(self, msg: Any) -> bool:
        self.sent.append(msg)
        return True


class FakeLinks:
    def __init__(self, links: dict[int, FakeLink]) -> None:
        self.links = links

    async def connected(self, node_id: int) -> FakeLink | None:
        await trio.lowlevel.checkpoint()
        return self.links.get(node_id)

    def open_link(self, node_id: int) -> FakeLink | None:
        return self.links.get(node_id)

    def reachable(self) -> set[int]:
        return set(self.links)


class NoLocal:
    async def submit(self, msg: Store, sink: Any) -> None:
        raise AssertionError("no STORE goes to this node in these tests")

    def on_release(self, log_id: int, lsn: int) -> None:
        raise AssertionError("no RELEASE goes to this node in these tests")


def store(store_id: int, log_id: int) -> Store:
    b = make_batch([(1 << 32) | 1], [b"x"], timestamps_ms=[1], copyset=(2, 3), wave=1)
    return Store.of(store_id, log_id, 1, (2, 3), 0, True, b)


@contextlib.asynccontextmanager
async def running(links: dict[int, FakeLink]) -> AsyncIterator[tuple[Peers, list[Any]]]:
    """A node's ``Peers`` (node 1) over fake links, running until the block ends;
    with the STORE replies its host got."""
    replies: list[Any] = []

    async def on_reply(reply: StoreReply) -> None:
        replies.append(reply)

    async with trio.open_nursery() as nursery:
        peers = Peers(1, None, nursery, NoLocal(), on_reply)  # type: ignore[arg-type]
        peers.links = FakeLinks(links)  # type: ignore[assignment]
        nursery.start_soon(peers.run)
        yield peers, replies
        nursery.cancel_scope.cancel()


async def test_a_burst_s_stores_leave_as_one_message_per_peer_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    new, old = FakeLink(6), FakeLink(5)
    async with running({2: new, 3: old}) as (peers, replies):
        with peers.batching():
            for i in range(1, 6):
                await peers.queue_store(2, store(i, 100 + i))
                await peers.queue_store(3, store(10 + i, 100 + i))
                await trio.lowlevel.checkpoint()
            assert new.sent == old.sent == []  # the burst is not over
        await trio.sleep(0.001)
        # One StoreMany to the peer that speaks 6, in the order queued; the
        # STOREs one by one to the one that speaks 5.
        assert [type(m) for m in new.sent] == [StoreMany]
        assert [s.store_id for s in new.sent[0].stores()] == [1, 2, 3, 4, 5]
        assert [m.store_id for m in old.sent] == [11, 12, 13, 14, 15]
        assert replies == []


async def test_a_burst_that_lasts_holds_its_stores_only_so_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    link = FakeLink(6)
    async with running({2: link}) as (peers, _):
        with peers.batching():
            await peers.queue_store(2, store(1, 7))
            await trio.sleep(BURST_WAIT_S * 2)
            assert [m.store_id for m in link.sent] == [1]  # a lone STORE stays a STORE
            # A full box leaves at once, burst or not.
            for i in range(MANY_MAX):
                await peers.queue_store(2, store(10 + i, 7))
            assert len(link.sent) == 2
            assert len(link.sent[1].store_ids) == MANY_MAX


async def test_a_lone_store_outside_a_burst_leaves_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    link = FakeLink(6)
    async with running({2: link}) as (peers, _):
        await peers.queue_store(2, store(1, 7))
        assert [m.store_id for m in link.sent] == [1]  # no wait for the flusher


async def test_stores_for_a_peer_out_of_reach_are_answered_connfailed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running({}) as (peers, replies):
        await peers.queue_store(4, store(1, 7))
        await peers.queue_store(4, store(2, 8))
        await trio.sleep(0.01)
        assert replies == [
            StoreReply(1, 7, int(Status.CONNFAILED), 4),
            StoreReply(2, 8, int(Status.CONNFAILED), 4),
        ]


async def test_answers_of_many_stores_reach_the_host_each_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running({}) as (peers, replies):
        some = [StoreReply(i, 50 + i, 0, 2) for i in range(3)]
        await peers._unasked(None, StoreReplies.of(2, some))  # type: ignore[arg-type]
        await trio.sleep(0.01)
        assert replies == some


async def test_releases_for_a_peer_leave_together(autojump_clock: trio.testing.MockClock) -> None:
    new, old = FakeLink(6), FakeLink(5)
    async with running({2: new, 3: old}) as (peers, _):
        pairs = [(7, 70), (8, 80)]
        await peers.send_releases(2, pairs)
        await peers.send_releases(3, pairs)
        assert new.sent == [ReleaseMany((7, 8), (70, 80))]
        assert old.sent == [Release(7, 70), Release(8, 80)]


class StuckLink(FakeLink):
    """A peer that never reads: its queue is full, a send waits for ever."""

    async def send(self, msg: Any) -> None:
        await trio.sleep_forever()

    def send_nowait(self, msg: Any) -> bool:
        return False


async def test_a_peer_that_never_reads_holds_up_no_other_peer_s_stores(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stuck, fine = StuckLink(6), FakeLink(6)
    async with running({2: stuck, 3: fine}) as (peers, _):
        await peers.queue_store(2, store(1, 7))
        await trio.sleep(0.01)
        await peers.queue_store(3, store(2, 7))
        await peers.queue_store(2, store(3, 8))
        await trio.sleep(0.01)
        assert [m.store_id for m in fine.sent] == [2]
        await peers.queue_store(3, store(4, 8))
        await trio.sleep(0.01)
        assert [m.store_id for m in fine.sent] == [2, 4]

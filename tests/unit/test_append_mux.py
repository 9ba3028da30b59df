"""The client's per-node outbox (``client._append_mux``): a lone append goes
alone, appends that come while others are out leave together, the number of
requests out is bounded, and a request refused as a whole goes again entry
by entry."""

from __future__ import annotations

from functools import partial

import trio
import trio.testing

from logstrand.batch import PackedBatch, make_batch
from logstrand.client._append_mux import (
    MANY_BYTES_MAX,
    MANY_IN_FLIGHT,
    Entry,
    NodeMux,
    send_alone,
    settle,
)
from logstrand.errors import Status
from logstrand.wire import AppendManyReply, AppendReply


def batch(size: int = 10) -> PackedBatch:
    return make_batch(range(1), [b"x" * size], timestamps_ms=0, keys=[None])


class FakeNode:
    """Answers each request after ``gate`` opens; LSN = log id * 100."""

    def __init__(self, refuse_many: bool = False) -> None:
        self.refuse_many = refuse_many
        self.redirect: set[int] = set()
        self.out = 0
        self.reset()

    def reset(self) -> None:
        self.alone: list[int] = []
        self.together: list[list[int]] = []
        self.out_max = 0
        self.gate = trio.Event()

    async def _wait(self) -> None:
        self.out += 1
        self.out_max = max(self.out_max, self.out)
        await self.gate.wait()
        self.out -= 1

    async def send_alone(self, log_id: int, b: PackedBatch) -> tuple[AppendReply | None, str]:
        self.alone.append(log_id)
        await self._wait()
        if log_id in self.redirect:
            return AppendReply(0, int(Status.REDIRECTED), redirect=2), ""
        return AppendReply(0, int(Status.OK), log_id * 100, len(b)), ""

    async def send_together(self, entries: list[Entry]) -> None:
        self.together.append([e.log_id for e in entries])
        await self._wait()
        if self.refuse_many:
            send_alone(entries)
            return
        n = len(entries)
        reply = AppendManyReply(
            1,
            (int(Status.OK),) * n,
            tuple(e.log_id * 100 for e in entries),
            (0,) * n,
            (0,) * n,
            ("",) * n,
        )
        settle(entries, reply, "")


async def run(
    node: FakeNode,
    logs: list[int],
    sizes: dict[int, int] | None = None,
    window: int = 1000,
    *,
    known: bool = True,
) -> dict[int, int]:
    """Attempts for ``logs`` all at once; ``known``: each log appended for
    once before (rule 4: only those wait for company)."""
    got: dict[int, int] = {}
    async with trio.open_nursery() as nursery:
        mux = NodeMux(nursery, node.send_alone, node.send_together, window)
        if known:
            node.gate.set()
            for log in logs:
                await mux.attempt(log, batch())
            node.reset()

        async def one(log: int) -> None:
            reply, why = await mux.attempt(log, batch((sizes or {}).get(log, 10)))
            assert reply is not None, why
            got[log] = reply.first_lsn

        for log in logs:
            nursery.start_soon(one, log)
        await trio.testing.wait_all_tasks_blocked()
        node.gate.set()
    return got


async def test_a_lone_append_goes_alone_and_those_that_come_meanwhile_go_together() -> None:
    node = FakeNode()
    got = await run(node, list(range(1, 101)))
    assert got == {log: log * 100 for log in range(1, 101)}
    assert len(node.alone) == 1  # the first found nothing out
    assert sorted(log for r in node.together for log in r) == sorted(
        set(range(1, 101)) - set(node.alone)
    )
    assert len(node.together) == 1  # the other 99 in one request
    assert node.out_max <= MANY_IN_FLIGHT


async def test_logs_that_may_need_an_activation_never_share_a_request_with_warm_ones() -> None:
    """Rule 4: a log new to the node (or redirected last time) may first be
    activated, and a request is answered when its last entry is: such
    attempts go in requests of their own, never beside warm logs'."""
    node = FakeNode()
    async with trio.open_nursery() as nursery:
        mux = NodeMux(nursery, node.send_alone, node.send_together, 1000)
        node.gate.set()
        node.redirect = {6}
        for log in range(1, 7):  # 1-5 appended here; 6 redirected elsewhere
            await mux.attempt(log, batch())
        node.reset()
        node.redirect = set()
        for log in range(1, 21):  # 7-20 are new to the node
            nursery.start_soon(mux.attempt, log, batch())
        await trio.testing.wait_all_tasks_blocked()
        node.gate.set()
    warm = set(range(1, 6))
    assert len(node.alone) == 1  # the first to run found nothing out
    assert len(node.together) >= 2
    for request in node.together:
        assert set(request) <= warm or not set(request) & warm, request
    assert sorted(node.alone + [log for r in node.together for log in r]) == list(range(1, 21))


async def test_requests_out_to_a_node_are_bounded_and_big_batches_go_alone() -> None:
    node = FakeNode()
    big = MANY_BYTES_MAX // 3
    sizes = dict.fromkeys(range(1, 40), big)  # three of them fill a request
    sizes[40] = MANY_BYTES_MAX + 1
    got = await run(node, list(range(1, 41)), sizes)
    assert len(got) == 40
    assert 40 in node.alone  # too big to go with others
    assert node.out_max <= MANY_IN_FLIGHT
    assert all(len(r) <= 3 for r in node.together)


async def test_a_request_refused_as_a_whole_goes_again_entry_by_entry() -> None:
    node = FakeNode(refuse_many=True)
    got = await run(node, list(range(1, 21)))
    assert got == {log: log * 100 for log in range(1, 21)}
    assert sorted(node.alone) == list(range(1, 21))


def test_entries_take_their_part_of_the_answer_or_what_befell_the_request() -> None:
    entries = [Entry(7, batch()), Entry(8, batch())]
    settle(entries, None, "node 2 did not answer in time")
    assert [e.outcome for e in entries] == [(None, "node 2 did not answer in time")] * 2
    entries = [Entry(7, batch())]
    settle(entries, AppendManyReply(1, (), (), (), (), ()), "")
    assert entries[0].outcome[0] is None
    assert "malformed" in entries[0].outcome[1]
    entries = [Entry(7, batch()), Entry(8, batch())]
    reply = AppendManyReply(
        1, (int(Status.OK), int(Status.REDIRECTED)), (5, 0), (9, 0), (0, 3), ("", "go to 3")
    )
    settle(entries, reply, "")
    first, second = entries[0].outcome[0], entries[1].outcome[0]
    assert first is not None
    assert (first.status, first.first_lsn, first.redirect) == (0, 5, None)
    assert second is not None
    assert (second.status, second.redirect, second.message) == (
        int(Status.REDIRECTED),
        3,
        "go to 3",
    )


async def test_batches_out_to_a_node_stay_within_the_window() -> None:
    """Rule 2: with a window of 16, 200 attempts at once leave in requests of
    at most 16 batches, never more than 16 out together."""
    node = FakeNode()
    entries_out: list[int] = []
    together = node.send_together

    async def counting(entries: list[Entry]) -> None:
        entries_out.append(len(entries))
        await together(entries)

    node.send_together = counting  # type: ignore[method-assign]
    got = await run(node, list(range(1, 201)), window=16)
    assert len(got) == 200
    assert max(entries_out) <= 16
    assert sum(entries_out) + len(node.alone) == 200


async def test_a_retry_waits_at_the_front_of_the_outbox_not_at_the_back() -> None:
    """Rule 5: an attempt that retries goes before the attempts that queued
    after its append was first sent (with a window of one, one at a time)."""
    node = FakeNode()
    sent: list[list[int]] = []
    alone, together = node.send_alone, node.send_together

    async def send_alone(log_id: int, b: PackedBatch) -> tuple[AppendReply | None, str]:
        sent.append([log_id])
        return await alone(log_id, b)

    async def send_together(entries: list[Entry]) -> None:
        sent.append([e.log_id for e in entries])
        await together(entries)

    async with trio.open_nursery() as nursery:
        mux = NodeMux(nursery, send_alone, send_together, 1)
        for log in range(1, 6):  # 1 goes out; 2-5 wait in the outbox
            nursery.start_soon(mux.attempt, log, batch())
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(partial(mux.attempt, 99, batch(), again=True))
        await trio.testing.wait_all_tasks_blocked()
        node.gate.set()
    assert [log for request in sent for log in request] == [1, 99, 2, 3, 4, 5]

"""The client's watch on slow nodes (``client._nodewatch``): many requests
waiting on one slow node ask the other nodes once, not once each."""

from __future__ import annotations

from typing import Any

import trio

from logstrand.client._nodewatch import NodeWatch
from logstrand.wire import ClusterState


class _View:
    def __init__(self) -> None:
        self.up = frozenset({1, 2, 3})
        self.suspects: set[int] = set()

    def suspected(self, node: int) -> bool:
        return node in self.suspects

    def suspect(self, node: int, ttl_s: float = 5.0) -> None:
        self.suspects.add(node)


class _Links:
    """GetClusterState takes 0.3 s; node 2 is found dead from the third question on."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def request(self, node: int, make: Any, timeout_s: float) -> ClusterState:
        self.asked.append(node)
        await trio.sleep(0.3)
        dead = (2,) if len(self.asked) >= 3 else ()
        return ClusterState(make(0).request_id, 0, dead)


async def test_a_thousand_waiters_on_one_slow_node_ask_one_question_at_a_time() -> None:
    view, links = _View(), _Links()
    async with trio.open_nursery() as nursery:
        watch = NodeWatch(view, links, nursery, poll_s=0.25)  # type: ignore[arg-type]
        gone = [0]

        async def waiter() -> None:
            await watch.wait_gone(2)
            gone[0] += 1

        with trio.fail_after(10):
            async with trio.open_nursery() as waiters:
                for _ in range(1000):
                    waiters.start_soon(waiter)
        nursery.cancel_scope.cancel()
    assert gone[0] == 1000
    assert view.suspected(2)
    # One question in flight at a time: three or four in all, not thousands.
    assert 3 <= len(links.asked) <= 5, links.asked


async def test_polling_stops_once_no_request_waits() -> None:
    view, links = _View(), _Links()
    async with trio.open_nursery() as nursery:
        watch = NodeWatch(view, links, nursery, poll_s=0.05)  # type: ignore[arg-type]
        async with trio.open_nursery() as waiters:
            for _ in range(100):
                waiters.start_soon(watch.wait_gone, 3)
            await trio.sleep(0.1)
            waiters.cancel_scope.cancel()  # their answers came
        await trio.sleep(0.5)
        asked = len(links.asked)
        await trio.sleep(0.5)
        assert len(links.asked) == asked  # nobody asks any more
        assert asked <= 2
        assert not watch._watches
        nursery.cancel_scope.cancel()
    assert not view.suspected(3)

"""``ClusterView.refresh`` under a crowd: callers that come while a refresh
runs share the next one, and each sees what was true when it called."""

from __future__ import annotations

import trio
import trio.lowlevel

from logstrand.epochstore import LogAttributes, NodeConfig
from logstrand.rpc import ClusterView
from logstrand.testing import MemoryEpochStore


async def test_a_thousand_refreshes_read_the_store_a_few_times_and_see_new_logs() -> None:
    store = MemoryEpochStore()
    store.add_node(NodeConfig(1, "127.0.0.1:4001"))
    view = ClusterView(store)
    reads = [0]
    log_ranges = store.log_ranges

    def counted() -> object:
        reads[0] += 1
        return log_ranges()

    store.log_ranges = counted  # type: ignore[method-assign]
    await view.refresh()
    assert reads[0] == 1
    seen: list[bool] = []

    async def caller() -> None:
        await view.refresh()
        seen.append(view.log_attributes(7) is not None)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(view.refresh)  # the refresh running when the log appears
        await trio.lowlevel.checkpoint()
        store.create_logs(1, 10, LogAttributes(replication_factor=1))
        for _ in range(1000):
            nursery.start_soon(caller)
    assert seen == [True] * 1000  # each saw the log created before it called
    assert reads[0] <= 4

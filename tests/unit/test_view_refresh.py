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


async def test_owners_are_worked_out_once_per_change_of_what_they_rest_on(
    monkeypatch: object,
) -> None:
    """Every append asks who runs its log's sequencer: the answer is hashed
    once per log until the nodes, the membership, the health or a suspicion
    changes, and a suspicion that runs out counts as a change."""
    import logstrand.rpc._view as view_module

    store = MemoryEpochStore()
    for n in (1, 2, 3):
        store.add_node(NodeConfig(n, f"127.0.0.1:{4000 + n}"))
        store.register_member(n)
    view = ClusterView(store)
    await view.refresh()
    hashed: list[int] = []
    real = view_module.rendezvous_owner

    def counting(log_id: int, weights: dict[int, float]) -> int | None:
        hashed.append(log_id)
        return real(log_id, weights)

    monkeypatch.setattr(view_module, "rendezvous_owner", counting)  # type: ignore[attr-defined]
    owners = {log: view.sequencer_node(log) for log in range(1, 1001)}
    for _ in range(5):
        assert {log: view.sequencer_node(log) for log in range(1, 1001)} == owners
    assert len(hashed) == 1000
    moved = next(iter(set(owners.values())))
    view.suspect(moved, ttl_s=0.2)
    assert all(view.sequencer_node(log) != moved for log in range(1, 1001))
    assert len(hashed) == 2000
    await trio.sleep(0.25)  # the suspicion ran out: the owners are back
    assert {log: view.sequencer_node(log) for log in range(1, 1001)} == owners
    assert len(hashed) == 3000
    view.set_health(frozenset({moved}), frozenset())
    assert all(view.sequencer_node(log) != moved for log in range(1, 1001))
    view.set_health(frozenset(), frozenset())
    assert {log: view.sequencer_node(log) for log in range(1, 1001)} == owners

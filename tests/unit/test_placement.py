from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.placement import CopysetSelector, rendezvous_owner, select_nodeset


def test_rendezvous_is_stable_and_only_moves_the_dead_nodes_logs() -> None:
    weights = {n: 1.0 for n in range(1, 6)}
    before = {log: rendezvous_owner(log, weights) for log in range(1, 2001)}
    del weights[3]
    after = {log: rendezvous_owner(log, weights) for log in range(1, 2001)}
    moved = [log for log in before if before[log] != after[log]]
    assert all(before[log] == 3 for log in moved)
    assert all(after[log] != 3 for log in after)
    assert len(moved) == sum(1 for o in before.values() if o == 3)


def test_rendezvous_follows_weights() -> None:
    weights = {1: 1.0, 2: 1.0, 3: 2.0, 4: 0.0}
    owners = collections.Counter(rendezvous_owner(log, weights) for log in range(1, 8001))
    assert owners[4] == 0
    assert 0.4 < owners[3] / 8000 < 0.6  # half the weight, about half the logs
    assert rendezvous_owner(1, {}) is None


def test_nodeset_is_deterministic_and_spans_domains() -> None:
    weights = {n: 1.0 for n in range(1, 10)}
    domains = {n: f"rack{n % 3}" for n in weights}
    a = select_nodeset(7, weights, domains, size=4, replication=3)
    assert a == select_nodeset(7, weights, domains, size=4, replication=3)
    assert len(a) == 4
    assert len({domains[n] for n in a}) >= 3
    assert select_nodeset(7, weights, domains, size=None, replication=3) == tuple(range(1, 10))
    assert len(select_nodeset(7, weights, domains, size=1, replication=2)) == 2  # raised to R


@given(
    st.integers(1, 5),
    st.integers(0, 2**32),
    st.sets(st.integers(1, 8), max_size=8),
    st.sampled_from([None, 1, 5, 9]),
)
def test_copysets_follow_the_rules(r: int, seed: int, exclude: set[int], local: int | None) -> None:
    nodeset = tuple(range(1, 9))
    domains = {n: f"rack{n % 4}" for n in nodeset}
    sel = CopysetSelector(nodeset, min(r, 4), domains=domains, rng=random.Random(seed), local=local)
    cs = sel.select(exclude)
    free = [n for n in nodeset if n not in exclude]
    if cs is None:
        assert len({domains[n] for n in free}) < min(r, 4)
        return
    assert len(cs) == min(r, 4)
    assert len(set(cs)) == len(cs)
    assert not set(cs) & exclude
    assert len({domains[n] for n in cs}) == len(cs)  # one copy per rack
    if local in free:  # the sequencer's own node holds a copy when it may, last
        assert cs[-1] == local


def test_copysets_are_weighted() -> None:
    sel = CopysetSelector((1, 2, 3), 1, weights={1: 1.0, 2: 3.0, 3: 0.0}, rng=random.Random(5))
    picks = collections.Counter(sel.select()[0] for _ in range(4000))  # type: ignore[index]
    assert picks[3] == 0
    assert 0.7 < picks[2] / 4000 < 0.8


def test_selector_rejects_impossible_replication() -> None:
    with pytest.raises(ValueError, match="cannot place"):
        CopysetSelector((1, 2), 3)


def test_the_local_node_is_one_copy_and_the_others_stay_spread() -> None:
    sel = CopysetSelector((1, 2, 3, 4), 2, rng=random.Random(3), local=2)
    picks = [sel.select() for _ in range(3000)]
    assert all(cs is not None and cs[-1] == 2 for cs in picks)
    others = collections.Counter(cs[0] for cs in picks if cs is not None)
    assert set(others) == {1, 3, 4}
    assert all(800 < n < 1200 for n in others.values())
    assert sel.select(exclude={2}) is not None  # a local node that failed is left out
    assert 2 not in sel.select(exclude={2})  # type: ignore[operator]

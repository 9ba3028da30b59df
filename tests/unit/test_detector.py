"""The nodes' failure detector (``storage._detector``) on a fake clock."""

from __future__ import annotations

import random

from logstrand.storage._detector import FailureDetector


def detector(members: tuple[int, ...] = (2, 3, 4), node: int = 1) -> FailureDetector:
    fd = FailureDetector(node, dead_after_s=3.0, fanout=2, rng=random.Random(1))
    fd.set_members({node, *members}, now=0.0)
    return fd


def test_a_member_nobody_hears_from_is_dead_after_the_bound() -> None:
    fd = detector()
    for t in (1.0, 2.0, 3.0, 3.5):
        fd.on_gossip(2, {2: 0}, True, now=t)
        fd.on_gossip(3, {3: 0}, True, now=t)
        assert fd.look(t) is None
    # Node 4 had the benefit of the doubt at t=0 and has said nothing since.
    assert fd.dead(2.9) == frozenset()
    assert fd.dead(3.5) == {4}


def test_word_through_a_third_node_keeps_a_member_alive() -> None:
    """1 cannot hear 4, but 2 can: 4 is not dead to 1."""
    fd = detector()
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        fd.on_gossip(2, {2: 0, 4: 200}, True, now=t)
        fd.on_gossip(3, {3: 0, 4: 2_900}, True, now=t)
    assert fd.dead(5.0) == frozenset()
    # Word that old is no word: 2's word of 4 ages past the bound.
    fd.on_gossip(2, {2: 0, 4: 3_500}, True, now=9.0)
    fd.on_gossip(3, {3: 0, 4: 3_600}, True, now=9.0)
    assert fd.dead(9.0) == {4}


def test_a_paused_node_forgets_its_ages_and_says_so() -> None:
    fd = detector()
    fd.look(1.0)
    why = fd.look(14.0)  # 13 s without a look: SIGSTOP
    assert why is not None
    assert why.startswith("paused for 13.0 s")
    # It had no chance to hear anyone: nobody is dead to it yet.
    assert fd.dead(14.0) == frozenset()
    fd.on_gossip(2, {2: 0, 3: 100}, True, now=17.0)
    assert fd.dead(17.5) == {4}


def test_a_node_cut_off_finds_nobody_dead_and_says_so_when_back() -> None:
    fd = detector()
    t = 0.0
    while t < 10.0:  # it hears nobody: it is the one cut off
        t += 0.25
        assert fd.look(t) is None
        assert fd.dead(t) == frozenset()
    assert fd.cut_off(t)
    fd.on_gossip(2, {2: 0, 3: 100}, True, now=t)
    why = fd.look(t)
    assert why is not None
    assert why.startswith("cut off from the other nodes")
    assert not fd.cut_off(t)
    assert fd.dead(t) == {4}


def test_new_members_get_the_benefit_of_the_doubt_and_gone_ones_are_forgotten() -> None:
    fd = detector(members=(2,))
    fd.on_gossip(2, {2: 0}, True, now=10.0)
    fd.set_members({1, 2, 5}, now=10.0)
    assert fd.dead(12.0) == frozenset()
    fd.on_gossip(2, {2: 0}, True, now=13.5)
    assert fd.dead(13.5) == {5}
    fd.set_members({1, 2}, now=13.5)
    assert fd.dead(13.5) == frozenset()
    assert not fd.is_member(5)


def test_gossip_says_who_takes_no_sequencers_and_what_to_send() -> None:
    fd = detector()
    fd.on_gossip(3, {3: 0}, False, now=1.0)
    assert fd.unwilling() == {3}
    fd.on_gossip(3, {3: 0}, True, now=2.0)
    assert fd.unwilling() == frozenset()
    fd.on_gossip(2, {2: 0}, True, now=2.0)
    assert fd.ages_ms(2.5) == {1: 0, 2: 500, 3: 500, 4: 2500}
    targets = fd.gossip_to()
    assert len(targets) == 2
    assert set(targets) <= {2, 3, 4}

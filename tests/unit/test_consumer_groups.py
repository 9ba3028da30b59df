"""The consumer group protocol's coordinator (KIP-848, ``groups._consumer``)
with a fake clock: the coordinator's own assignment, revocation before
reassignment, fencing, sessions, static members, and a seeded run in which
no partition is ever owned by two members at once."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.groups._consumer import Beat, ConsumerCoordinator, spread
from logstrand.kafka_errors import KafkaError

SIZES = {"a": 6, "b": 3}


def _sizes(topic: str) -> int:
    return SIZES.get(topic, 0)


class Members:
    """Members as librdkafka runs them: each owns what it was last given, and
    says so in its next heartbeat."""

    def __init__(self, session_ms: int = 10_000) -> None:
        ids = itertools.count()
        self.core = ConsumerCoordinator(session_ms, 1_000, ids=lambda: f"m{next(ids)}")
        self.now = 0.0
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, frozenset[tuple[str, int]]] = {}

    def join(self, topics: set[str], instance: str | None = None) -> str:
        code, out = self.core.heartbeat(
            self.now, Beat("g", "", 0, instance, frozenset(topics), frozenset()), _sizes
        )
        assert code == 0
        self._take(out)
        return str(out["member_id"])

    def _take(self, out: dict) -> None:
        m = out["member_id"]
        self.epoch[m] = out["member_epoch"]
        if out.get("assignment") is not None:
            self.owned[m] = frozenset(out["assignment"])

    def beat(self, m: str) -> int:
        code, out = self.core.heartbeat(
            self.now, Beat("g", m, self.epoch[m], owned=self.owned.get(m, frozenset())), _sizes
        )
        if code == 0:
            self._take(out)
        return code

    def settle(self, rounds: int = 6) -> None:
        for _ in range(rounds):
            for m in sorted(self.epoch):
                self.beat(m)

    def assert_disjoint(self) -> None:
        seen: dict[tuple[str, int], str] = {}
        for m, parts in self.owned.items():
            for p in parts:
                assert p not in seen, f"{p} owned by {seen[p]} and {m}"
                seen[p] = m


def test_members_share_the_partitions_of_their_topics_evenly() -> None:
    g = Members()
    a = g.join({"a"})
    assert g.owned[a] == {("a", i) for i in range(6)}
    b = g.join({"a", "b"})
    c = g.join({"a"})
    g.settle()
    g.assert_disjoint()
    assert sorted(len([p for p in g.owned[m] if p[0] == "a"]) for m in (a, b, c)) == [2, 2, 2]
    assert {p for p in g.owned[b] if p[0] == "b"} == {("b", 0), ("b", 1), ("b", 2)}
    assert g.core.groups["g"].state == "Stable"
    assert {g.epoch[m] for m in (a, b, c)} == {g.core.groups["g"].epoch}


def test_a_partition_moves_only_after_its_owner_gave_it_up() -> None:
    g = Members()
    a = g.join({"a"})
    b = g.join({"a"})
    # b's target holds half, but a has not revoked them yet: b gets nothing.
    assert g.owned[b] == frozenset()
    assert g.beat(a) == 0  # a is told to keep only its half
    assert len(g.owned[a]) == 3
    assert g.beat(b) == 0  # a has not said it gave them up: still nothing
    assert g.owned[b] == frozenset()
    g.beat(a)  # now it says so
    g.beat(b)
    assert len(g.owned[b]) == 3
    g.assert_disjoint()


def test_a_silent_member_is_dropped_after_its_session_and_others_take_over() -> None:
    g = Members(session_ms=6_000)
    a, b = g.join({"a"}), g.join({"a"})
    g.settle()
    for _ in range(7):
        g.now += 1.0
        g.beat(a)
        g.core.tick(g.now, _sizes)
    assert b not in g.core.groups["g"].members
    g.settle()
    assert len(g.owned[a]) == 6
    assert g.beat(b) == KafkaError.UNKNOWN_MEMBER_ID


def test_stale_epochs_are_fenced_and_commits_checked() -> None:
    g = Members()
    a = g.join({"a"})
    g.join({"a"})
    g.settle()
    g.epoch[a] = 99
    assert g.beat(a) == KafkaError.FENCED_MEMBER_EPOCH
    epoch = g.core.groups["g"].members[a].epoch
    assert g.core.check_commit("g", a, epoch) == 0
    assert g.core.check_commit("g", a, epoch + 5) == KafkaError.STALE_MEMBER_EPOCH
    assert g.core.check_commit("g", "nobody", epoch) == KafkaError.UNKNOWN_MEMBER_ID
    assert g.core.check_commit("g", "nobody", -1) == KafkaError.UNKNOWN_MEMBER_ID  # not empty
    # A consumer that assigned itself its partitions names itself but has no
    # epoch: taken while the group has no members, as Kafka does.
    assert g.core.check_commit("no-members", "self-assigned", -1) == 0


def test_a_static_member_that_comes_back_gets_its_partitions_again() -> None:
    g = Members()
    s = g.join({"a"}, instance="i1")
    t = g.join({"a"}, instance="i2")
    g.settle()
    kept, epoch = g.owned[t], g.core.groups["g"].epoch
    code, _ = g.core.heartbeat(g.now, Beat("g", t, -2), _sizes)
    assert code == 0
    g.now += 2.0
    g.beat(s)
    # Back with a new member id, the same instance: no new epoch, same partitions.
    code, out = g.core.heartbeat(g.now, Beat("g", "", 0, "i2", frozenset({"a"})), _sizes)
    assert code == 0
    assert out["assignment"] == kept
    assert g.core.groups["g"].epoch == epoch
    # While it is there, another process with its instance id is refused.
    code, _ = g.core.heartbeat(g.now, Beat("g", "", 0, "i2", frozenset({"a"})), _sizes)
    assert code == KafkaError.UNRELEASED_INSTANCE_ID


def test_a_snapshot_restores_epochs_and_ownership() -> None:
    g = Members()
    a, b = g.join({"a"}), g.join({"a"})
    g.settle()
    snap = g.core.snapshot("g")
    assert snap is not None
    other = ConsumerCoordinator(10_000, 1_000)
    other.restore(g.now, "g", snap)
    g.core = other
    assert g.beat(a) == 0
    assert g.beat(b) == 0
    assert g.owned[a] | g.owned[b] == {("a", i) for i in range(6)}
    g.assert_disjoint()


@given(
    st.dictionaries(
        st.sampled_from(["m1", "m2", "m3", "m4"]),
        st.frozensets(st.sampled_from(["a", "b"]), min_size=1),
        min_size=1,
    )
)
def test_the_target_covers_every_partition_once_and_evenly(subs: dict) -> None:
    target = spread(subs, SIZES, {})
    for topic, count in SIZES.items():
        takers = [m for m, ts in subs.items() if topic in ts]
        held = [p for m in takers for p in target[m] if p[0] == topic]
        if takers:
            assert sorted(held) == [(topic, i) for i in range(count)]
            shares = [len([p for p in target[m] if p[0] == topic]) for m in takers]
            assert max(shares) - min(shares) <= 1


@pytest.mark.parametrize("seed", range(20))
def test_members_coming_and_going_never_share_a_partition(seed: int) -> None:
    rng = random.Random(seed)
    g = Members(session_ms=5_000)
    silent: set[str] = set()
    for _ in range(120):
        roll = rng.random()
        live = sorted(g.epoch)
        if roll < 0.15 or not live:
            g.join(set(rng.sample(["a", "b"], rng.randint(1, 2))))
        elif roll < 0.22:
            m = rng.choice(live)
            g.core.heartbeat(g.now, Beat("g", m, -1), _sizes)
            del g.epoch[m]
            g.owned.pop(m, None)
        elif roll < 0.27:
            silent.add(rng.choice(live))
        else:
            g.now += rng.uniform(0.1, 1.5)
            g.core.tick(g.now, _sizes)
        for m in sorted(set(g.epoch) - silent):
            if g.beat(m) != 0:  # fenced or dropped: it lets go of everything
                del g.epoch[m]
                g.owned.pop(m, None)
        # A silent member still holds what it owned until the coordinator drops it.
        for m in list(silent):
            if m not in g.core.groups["g"].members:
                silent.discard(m)
                g.epoch.pop(m, None)
                g.owned.pop(m, None)
        g.assert_disjoint()
    # Left alone, the members that are still there end up with every partition.
    for _ in range(8):
        g.now += 1.0
        g.core.tick(g.now, _sizes)
        g.settle(1)
    members = g.core.groups["g"].members
    if members and not silent:
        subscribed = {t for m in members.values() for t in m.topics}
        want = {(t, i) for t in subscribed for i in range(SIZES[t])}
        assert set().union(*g.owned.values()) == want

"""Classic members in a consumer-protocol group (``groups._mixed``):
the upgrade of a classic group, classic members' join, sync and heartbeat
against the consumer core, and a seeded run of both kinds coming and going
in which no partition is ever owned twice."""

from __future__ import annotations

import random
import struct

import pytest

from logstrand.groups import _mixed as mixed
from logstrand.groups._consumer import Beat, ConsumerCoordinator
from logstrand.groups._model import (
    STABLE,
    Group,
    JoinArgs,
    Member,
    assigned_partitions,
    encode_assignment,
    encode_subscription,
)
from logstrand.kafka_errors import KafkaError
from tests.unit.test_consumer_groups import Members, _sizes

Parts = frozenset[tuple[str, int]]


def _subscription_v1(topics: list[str], owned: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolSubscription v1: topics, no user data, owned partitions."""
    out = bytearray(struct.pack(">hi", 1, len(topics)))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">ii", -1, len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return bytes(out)


def test_owned_partitions_read_from_v1_subscriptions_only() -> None:
    assert mixed.owned_partitions(_subscription_v1(["a"], {"a": [4, 1]})) == {("a", 4), ("a", 1)}
    assert mixed.owned_partitions(encode_subscription(["a"])) == frozenset()  # v0: none
    assert mixed.owned_partitions(b"\x00\x01garbage") == frozenset()


class Mixed(Members):
    """``Members`` (consumer-protocol members as librdkafka runs them), and
    classic members: each owns what its last SyncGroup gave it and, eager,
    gives it all up before it joins again (REBALANCE_IN_PROGRESS)."""

    def __init__(self) -> None:
        super().__init__(session_ms=10_000)
        self.classic: set[str] = set()

    def classic_join(self, member_id: str = "") -> str:
        args = JoinArgs(
            "g", member_id, None, 10_000, 10_000, "consumer",
            [("range", encode_subscription(["a"]))], require_id=False,
        )  # fmt: skip
        self.owned.pop(member_id, None)  # eager: all given up before joining
        answer = mixed.join(self.core, self.now, args, _sizes)
        assert answer["error_code"] == 0, answer
        assert (answer["leader"], answer["members"]) == ("", [])
        m = answer["member_id"]
        self.classic.add(m)
        synced = mixed.sync(self.core.groups["g"], answer["generation_id"], m)
        assert synced["error_code"] == 0
        parts = assigned_partitions(synced["assignment"])
        self.owned[m] = frozenset((t, i) for t, ps in parts.items() for i in ps)
        self.epoch[m] = answer["generation_id"]
        return str(m)

    def beat(self, m: str) -> int:
        if m in self.classic:
            code = mixed.heartbeat(self.core, self.now, self.core.groups["g"], self.epoch[m], m)
            if code == KafkaError.REBALANCE_IN_PROGRESS:
                self.classic_join(m)
                return 0
            return code
        return super().beat(m)

    def forget(self, m: str) -> None:
        self.epoch.pop(m, None)
        self.owned.pop(m, None)
        self.classic.discard(m)


def _classic_group() -> Group:
    """A Stable classic group of two members, generation 3, splitting t."""
    group = Group("g", STABLE, 3, "consumer", "range", "c1")
    for name, parts in (("c1", [0, 1, 2]), ("c2", [3, 4, 5])):
        group.members[name] = Member(
            name, None, "client", "host", 10_000, 10_000, "consumer",
            [("range", encode_subscription(["a"]))],
            assignment=encode_assignment([("a", i) for i in parts]), deadline=10.0,
        )  # fmt: skip
    return group


def test_an_upgraded_group_keeps_its_classic_members_and_splits_with_a_new_one() -> None:
    g = Mixed()
    mixed.upgrade(g.core, 0.0, _classic_group())
    cgroup = g.core.groups["g"]
    assert cgroup.epoch == 3
    assert {m: sorted(x.given) for m, x in cgroup.members.items()} == {
        "c1": [("a", 0), ("a", 1), ("a", 2)],
        "c2": [("a", 3), ("a", 4), ("a", 5)],
    }
    for m, parts in (("c1", {0, 1, 2}), ("c2", {3, 4, 5})):
        g.classic.add(m)
        g.epoch[m] = 3
        g.owned[m] = frozenset(("a", i) for i in parts)
        assert mixed.heartbeat(g.core, 1.0, cgroup, 3, m) == KafkaError.NONE  # stable
    new = g.join({"a"})
    # The classic members hear of the rebalance in their next heartbeat.
    assert mixed.heartbeat(g.core, 1.0, cgroup, 3, "c1") == KafkaError.REBALANCE_IN_PROGRESS
    assert mixed.heartbeat(g.core, 1.0, cgroup, 2, "c1") == KafkaError.ILLEGAL_GENERATION
    # An eager member gave everything up before it joined again: what its
    # target lost is free for the others at once, not after another round.
    g.classic_join("c1")
    assert not cgroup.members["c1"].revoking
    assert len(cgroup.members["c1"].given) == 2
    for _ in range(4):
        for m in sorted(g.epoch):
            assert g.beat(m) == 0
            g.assert_disjoint()
    assert {len(g.owned[m]) for m in ("c1", "c2", new)} == {2}
    assert set().union(*g.owned.values()) == {("a", i) for i in range(6)}
    assert g.core.check_commit("g", "c1", g.epoch["c1"] - 5) == KafkaError.ILLEGAL_GENERATION
    # The group is written down with its classic members, and read back so.
    snap = g.core.snapshot("g")
    assert snap is not None
    other = ConsumerCoordinator()
    other.restore(5.0, "g", snap)
    assert other.groups["g"].members["c1"].classic == cgroup.members["c1"].classic
    # Classic members leave; the consumer-protocol member gets everything.
    assert mixed.leave(g.core, cgroup, [("c1", None), ("nope", None)], _sizes) == [
        KafkaError.NONE,
        KafkaError.UNKNOWN_MEMBER_ID,
    ]
    g.forget("c1")
    assert mixed.leave(g.core, cgroup, [("c2", None)], _sizes) == [KafkaError.NONE]
    g.forget("c2")
    for _ in range(3):
        g.beat(new)
    assert g.owned[new] == {("a", i) for i in range(6)}


def test_a_classic_join_to_a_consumer_group_asks_for_a_member_id_first() -> None:
    g = Mixed()
    g.join({"a"})
    args = JoinArgs("g", "", None, 10_000, 10_000, "consumer", [("range", b"")], require_id=True)
    first = mixed.join(g.core, 0.0, args, _sizes)
    assert first["error_code"] == KafkaError.MEMBER_ID_REQUIRED
    assert first["member_id"]
    other = JoinArgs("g", "x", None, 10_000, 10_000, "connect", [("v1", b"")])
    assert mixed.join(g.core, 0.0, other, _sizes)["error_code"] == (
        KafkaError.INCONSISTENT_GROUP_PROTOCOL
    )
    assert mixed.sync(g.core.groups["g"], 1, "nobody")["error_code"] == (
        KafkaError.UNKNOWN_MEMBER_ID
    )


@pytest.mark.parametrize("seed", range(20))
def test_both_kinds_coming_and_going_never_share_a_partition(seed: int) -> None:
    rng = random.Random(seed)
    g = Mixed()
    g.join({"a"})
    for _ in range(100):
        roll = rng.random()
        live = sorted(g.epoch)
        if roll < 0.12 or not live:
            g.join({"a"})
        elif roll < 0.24:
            g.classic_join()
        elif roll < 0.32:
            m = rng.choice(live)
            if m in g.classic:
                mixed.leave(g.core, g.core.groups["g"], [(m, None)], _sizes)
            else:
                g.core.heartbeat(g.now, Beat("g", m, -1), _sizes)
            g.forget(m)
        else:
            g.now += rng.uniform(0.1, 1.0)
            g.core.tick(g.now, _sizes)
        for m in sorted(g.epoch):
            if m not in g.core.groups["g"].members or g.beat(m) != 0:
                g.forget(m)  # dropped or fenced: it lets go of everything
        g.assert_disjoint()
    for _ in range(6):
        for m in sorted(g.epoch):
            g.beat(m)
    if g.core.groups["g"].members:
        assert set().union(*g.owned.values()) == {("a", i) for i in range(6)}


def test_a_group_left_with_classic_members_only_is_classic_again() -> None:
    """Rule 5: the downgrade keeps the classic members, their protocols and
    partitions, and starts a rebalance they join with the classic protocol."""
    from logstrand.groups._classic import Coordinator
    from logstrand.groups._model import PREPARING

    g = Mixed()
    new = g.join({"a"})
    c1 = g.classic_join()
    for _ in range(3):
        for m in sorted(g.epoch):
            g.beat(m)
    cgroup = g.core.groups["g"]
    assert not mixed.all_classic(cgroup)
    g.core.heartbeat(g.now, Beat("g", new, -1), _sizes)
    assert mixed.all_classic(cgroup)
    classic = Coordinator()
    group = mixed.downgrade(cgroup)
    assert classic.adopt(group, g.now) == []
    assert group.state == PREPARING
    member = group.members[c1]
    assert member.protocols == [("range", encode_subscription(["a"]))]
    assert assigned_partitions(member.assignment) == {"a": sorted(i for _, i in g.owned[c1])}
    # Its next heartbeat tells it to join the classic group.
    code = classic.heartbeat(g.now, "g", group.generation, c1, None)
    assert code == KafkaError.REBALANCE_IN_PROGRESS

"""The classic group protocol's coordinator (``groups._classic``), driven
with a fake clock: joins, rebalances, syncs, sessions, static members,
commits, and a seeded run of many members coming and going."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from logstrand.groups._classic import Coordinator
from logstrand.groups._model import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    JoinArgs,
    Settings,
    assigned_partitions,
    subscribed_topics,
)
from logstrand.kafka_errors import KafkaError

SESSION = 10_000


class Harness:
    """A coordinator and the answers it gave, by token."""

    def __init__(self, **settings: Any) -> None:
        ids = itertools.count()
        self.core = Coordinator(
            Settings(initial_delay_s=0.0, **settings), lambda: f"{next(ids):04}"
        )
        self.now = 0.0
        self.answers: dict[int, dict[str, Any]] = {}
        self.token = 0

    def _take(self, replies: list[tuple[int, dict[str, Any]]]) -> None:
        for token, body in replies:
            assert token not in self.answers, "answered twice"
            self.answers[token] = body

    def join(
        self,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = SESSION,
        group: str = "g",
    ) -> int:
        self.token += 1
        args = JoinArgs(
            group,
            member_id,
            instance,
            session_ms,
            session_ms,
            "consumer",
            protocols or [("range", b"m-" + member_id.encode())],
        )
        self._take(self.core.join(self.now, self.token, args))
        return self.token

    def join_new(self, **kw: Any) -> int:
        """A dynamic member's two joins (the first one is told its id)."""
        first = self.join(**kw)
        assert self.answers[first]["error_code"] == KafkaError.MEMBER_ID_REQUIRED
        return self.join(self.answers[first]["member_id"], **kw)

    def sync(self, token: int, assignments: dict[str, bytes] | None = None) -> int:
        joined = self.answers[token]
        self.token += 1
        self._take(
            self.core.sync(
                self.now,
                self.token,
                "g",
                joined["generation_id"],
                joined["member_id"],
                None,
                assignments or {},
            )
        )
        return self.token

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._take(self.core.tick(self.now))


def test_three_members_join_one_generation_and_the_leader_assigns() -> None:
    h = Harness()
    first = h.join_new()
    # The first member's join completes at once (every member known joined).
    assert h.answers[first]["generation_id"] == 1
    a = h.answers[first]["member_id"]
    assert h.core.state_of("g") == COMPLETING
    # Two more come: a rebalance in which the first must join again.
    t2 = h.join_new()
    t3 = h.join_new()
    assert t2 not in h.answers
    assert t3 not in h.answers
    assert h.core.state_of("g") == PREPARING
    again = h.join(a)
    gen = {h.answers[t]["generation_id"] for t in (again, t2, t3)}
    assert gen == {2}
    leader = h.answers[again]["leader"]
    assert leader == a
    assert len(h.answers[again]["members"]) == 3
    assert h.answers[t2]["members"] == []
    ids = [h.answers[t]["member_id"] for t in (again, t2, t3)]
    s2, s3 = h.sync(t2), h.sync(t3)
    assert s2 not in h.answers  # followers wait for the leader's assignment
    s1 = h.sync(again, {m: m.encode() for m in ids})
    assert h.core.state_of("g") == STABLE
    assert [h.answers[s]["assignment"] for s in (s1, s2, s3)] == [m.encode() for m in ids]
    assert h.core.take_stabilized() == ["g"]


def test_a_member_whose_session_ends_is_dropped_and_the_rest_rebalance() -> None:
    h = Harness()
    first = h.join_new()
    second = h.join_new()
    rejoin = h.join(h.answers[first]["member_id"])
    ids = [h.answers[t]["member_id"] for t in (rejoin, second)]
    h.sync(rejoin, {i: b"x" for i in ids})
    h.sync(second)
    assert h.core.state_of("g") == STABLE
    # Only the first member heartbeats.
    for _ in range(12):
        h.advance(1.0)
        assert h.core.heartbeat(h.now, "g", 2, ids[0], None) in (
            0,
            KafkaError.REBALANCE_IN_PROGRESS,
        )
    assert h.core.state_of("g") == PREPARING
    assert h.core.heartbeat(h.now, "g", 2, ids[1], None) == KafkaError.UNKNOWN_MEMBER_ID
    t = h.join(ids[0])
    assert h.answers[t]["generation_id"] == 3
    assert [m["member_id"] for m in h.answers[t]["members"]] == [ids[0]]


def test_a_member_that_does_not_rejoin_in_time_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    a = h.join_new()
    ida = h.answers[a]["member_id"]
    h.sync(a, {ida: b"a"})
    b = h.join_new()
    assert b not in h.answers
    h.advance(SESSION / 1000 + 0.1)
    assert h.answers[b]["generation_id"] == 2
    assert [m["member_id"] for m in h.answers[b]["members"]] == [h.answers[b]["member_id"]]


def test_leave_rebalances_at_once_and_the_last_leave_empties_the_group() -> None:
    h = Harness()
    a = h.join_new()
    ida = h.answers[a]["member_id"]
    h.sync(a, {ida: b"a"})
    codes, _ = h.core.leave(h.now, "g", [(ida, None), ("nobody", None)])
    assert codes == [0, KafkaError.UNKNOWN_MEMBER_ID]
    assert h.core.state_of("g") == EMPTY
    assert h.core.forget("g") == 0


def test_stale_generations_and_unknown_members_are_refused() -> None:
    h = Harness()
    a = h.join_new()
    ida = h.answers[a]["member_id"]
    assert h.core.heartbeat(h.now, "g", 7, ida, None) == KafkaError.ILLEGAL_GENERATION
    assert h.core.check_commit("g", 1, ida, None) == KafkaError.REBALANCE_IN_PROGRESS
    h.sync(a, {ida: b"a"})
    assert h.core.check_commit("g", 1, ida, None) == 0
    assert h.core.check_commit("g", 0, ida, None) == KafkaError.ILLEGAL_GENERATION
    assert h.core.check_commit("g", -1, "", None) == KafkaError.UNKNOWN_MEMBER_ID
    assert h.core.check_commit("other", -1, "", None) == 0
    assert h.core.check_commit("g", -1, "self-assigned", None) == KafkaError.UNKNOWN_MEMBER_ID
    assert h.core.check_commit("other", -1, "self-assigned", None) == 0  # no members
    assert h.join("made-up")  # an id the coordinator never gave
    assert h.answers[h.token]["error_code"] == KafkaError.UNKNOWN_MEMBER_ID
    assert h.core.forget("g") == KafkaError.NON_EMPTY_GROUP


def test_a_static_member_restarted_keeps_its_assignment_without_a_rebalance() -> None:
    h = Harness()
    a = h.join(instance="i-a")
    b = h.join(instance="i-b")
    assert b not in h.answers  # a second member: everyone joins again
    ida, idb = h.answers[a]["member_id"], None
    a2 = h.join(ida, instance="i-a")
    idb = h.answers[b]["member_id"]
    gen = h.answers[a2]["generation_id"]
    h.sync(a2, {ida: b"A", idb: b"B"})
    h.sync(b)
    assert h.core.state_of("g") == STABLE
    # i-b restarts: it joins with no member id and the same instance id (and
    # metadata of its own: librdkafka's lists the partitions it owns, none now).
    again = h.join(instance="i-b", protocols=[("range", b"owns nothing")])
    new_id = h.answers[again]["member_id"]
    assert new_id != idb
    assert h.answers[again]["generation_id"] == gen
    assert h.core.state_of("g") == STABLE
    assert h.answers[h.sync(again)]["assignment"] == b"B"
    # The old incarnation is fenced.
    assert h.core.heartbeat(h.now, "g", gen, idb, "i-b") == KafkaError.FENCED_INSTANCE_ID


def test_the_protocol_all_members_support_is_chosen_by_their_votes() -> None:
    h = Harness()
    both = [("cooperative-sticky", b""), ("range", b"")]
    a = h.join_new(protocols=both)
    ida = h.answers[a]["member_id"]
    h.sync(a, {ida: b""})
    b = h.join_new(protocols=[("range", b""), ("cooperative-sticky", b"")])
    c = h.join_new(protocols=[("range", b"")])
    h.join(ida, protocols=both)
    assert h.answers[b]["protocol_name"] == "range"
    assert h.answers[c]["protocol_name"] == "range"
    odd = h.join(protocols=[("roundrobin-only", b"")])
    assert h.answers[odd]["error_code"] == KafkaError.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeouts_out_of_bounds_are_refused() -> None:
    h = Harness()
    t = h.join(session_ms=10)
    assert h.answers[t]["error_code"] == KafkaError.INVALID_SESSION_TIMEOUT


def test_a_snapshot_restores_the_same_generation_and_assignments() -> None:
    h = Harness()
    a = h.join_new()
    ida = h.answers[a]["member_id"]
    h.sync(a, {ida: b"A"})
    snap = h.core.snapshot("g")
    assert snap is not None
    other = Coordinator()
    other.restore(100.0, "g", snap)
    assert other.state_of("g") == STABLE
    assert other.heartbeat(100.0, "g", 1, ida, None) == 0
    assert other.groups["g"].members[ida].assignment == b"A"
    # A member that never comes back is dropped when its session ends.
    assert other.tick(100.0 + SESSION / 1000 + 1) == []
    assert other.state_of("g") == EMPTY


def test_clear_answers_every_waiting_request_not_coordinator() -> None:
    h = Harness()
    a = h.join_new()
    h.join_new()  # waits for the first to join again
    h._take(h.core.clear())
    assert h.answers[h.token]["error_code"] == KafkaError.NOT_COORDINATOR
    assert h.core.state_of("g") is None
    assert a in h.answers


@pytest.mark.parametrize("seed", range(20))
def test_members_coming_and_going_always_end_in_one_generation(seed: int) -> None:
    """A seeded run: members join, leave, fall silent; whenever the members
    still there have all joined again and the leader synced, the group is
    Stable with exactly them, every request is answered once (``Harness``
    checks) and generations only go up."""
    rng = random.Random(seed)
    h = Harness()
    live: dict[str, int] = {}  # member id -> the generation it last joined
    waiting: dict[str, int] = {}  # member id -> its join's token, not yet answered
    silent: set[str] = set()
    last_gen = 0
    stable_seen = 0

    def settle() -> None:
        for m, t in list(waiting.items()):
            if t in h.answers:
                del waiting[m]
                if h.answers[t]["error_code"] == 0:
                    live[m] = h.answers[t]["generation_id"]
                else:
                    live.pop(m, None)

    for _ in range(80):
        roll = rng.random()
        if roll < 0.35 or not live:
            first = h.join()
            m = h.answers[first]["member_id"]
            live[m] = -1
            waiting[m] = h.join(m)
        elif roll < 0.5:
            gone = rng.choice(sorted(live))
            del live[gone]
            h._take(h.core.leave(h.now, "g", [(gone, None)])[1])
        elif roll < 0.6:
            silent.add(rng.choice(sorted(live)))
        else:
            h.advance(rng.uniform(0.1, 3.0))
        settle()
        if h.core.state_of("g") == PREPARING:
            for m in sorted(set(live) - set(waiting) - silent):
                waiting[m] = h.join(m)
            h.advance(0.0)
            settle()
        group = h.core.groups["g"]
        if group.state == COMPLETING:
            leader_join = next(
                t
                for t in range(h.token, 0, -1)
                if h.answers.get(t, {}).get("members")
                and h.answers[t]["generation_id"] == group.generation
            )
            h.sync(leader_join, {m: m.encode() for m in group.members})
        for m in list(silent):
            if m not in group.members:
                silent.discard(m)
                live.pop(m, None)
                waiting.pop(m, None)
        assert group.generation >= last_gen
        last_gen = group.generation
        if group.state == STABLE:
            stable_seen += 1
            assert set(group.members) == set(live)
            assert {m.assignment for m in group.members.values()} == {m.encode() for m in live}
        for m in sorted(set(live) - silent):
            if h.core.heartbeat(h.now, "g", live[m], m, None) == KafkaError.UNKNOWN_MEMBER_ID:
                del live[m]
    assert stable_seen >= 5


def test_consumer_protocol_subscriptions_and_assignments_read() -> None:
    sub = b"\x00\x01" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    assert subscribed_topics(sub) == {"a", "bc"}
    assignment = (
        b"\x00\x00"
        + b"\x00\x00\x00\x01"
        + b"\x00\x01a"
        + b"\x00\x00\x00\x02"
        + bytes([0, 0, 0, 1, 0, 0, 0, 3])
    )
    assert assigned_partitions(assignment) == {"a": [1, 3]}
    assert subscribed_topics(b"junk") == set()
    assert assigned_partitions(b"\x00\x00\x7f\xff\xff\xff") == {}


def test_heartbeats_do_not_grow_the_coordinator_s_timers() -> None:
    h = Harness()
    a = h.join_new()
    ida = h.answers[a]["member_id"]
    h.sync(a, {ida: b"a"})
    for _ in range(1000):
        h.advance(0.5)
        assert h.core.heartbeat(h.now, "g", 1, ida, None) == 0
    assert len(h.core._deadlines) <= 3
    assert h.core.state_of("g") == STABLE
    # Silence: dropped one session after the last heartbeat, not before.
    h.advance(SESSION / 1000 - 0.1)
    assert h.core.state_of("g") == STABLE
    h.advance(0.2)
    assert h.core.state_of("g") == EMPTY


def test_a_static_leader_that_comes_back_skips_the_assignment() -> None:
    h = Harness()
    a = h.join(instance="i-a")
    ida = h.answers[a]["member_id"]
    b = h.join(instance="i-b")
    a2 = h.join(ida, instance="i-a")
    idb = h.answers[b]["member_id"]
    assert h.answers[a2]["leader"] == ida
    gen = h.answers[a2]["generation_id"]
    h.sync(a2, {ida: b"A", idb: b"B"})
    h.sync(b)
    # The leader restarts with a JoinGroup v9: no rebalance, and it is told
    # to skip the assignment (it still gets the members).
    h.token += 1
    same = [("range", b"m-" + ida.encode())]  # what it joined with before
    args = JoinArgs("g", "", "i-a", SESSION, SESSION, "consumer", same, can_skip=True)
    h._take(h.core.join(h.now, h.token, args))
    back = h.answers[h.token]
    assert back["skip_assignment"] is True
    assert back["generation_id"] == gen
    assert len(back["members"]) == 2
    assert h.core.state_of("g") == STABLE
    assert h.answers[h.sync(h.token, {})]["assignment"] == b"A"

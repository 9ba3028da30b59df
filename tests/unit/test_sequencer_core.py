"""The sequencer core, driven by hand and by hypothesis with a fake clock."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import PackedBatch, make_batch
from logstrand.errors import Status
from logstrand.placement import CopysetSelector
from logstrand.sequencer import ReplyAppend, SendRelease, SendStore, SequencerCore

EPOCH = 3


def batch(n: int, size: int = 10) -> PackedBatch:
    return make_batch(range(n), [b"x" * size] * n, timestamps_ms=0)


def core(r: int = 2, nodes: int = 4, **kw: object) -> SequencerCore:
    sel = CopysetSelector(tuple(range(1, nodes + 1)), r, rng=random.Random(1))
    return SequencerCore(7, EPOCH, sel, **kw)  # type: ignore[arg-type]


def stores(actions: list[object]) -> list[SendStore]:
    return [a for a in actions if isinstance(a, SendStore)]


def ack_all(c: SequencerCore, sent: list[SendStore], now: float = 0.0) -> list[object]:
    out: list[object] = []
    for s in sent:
        out += c.on_stored(s.message.store_id, s.node_id, Status.OK, now)
    return out


def test_append_gets_consecutive_lsns_after_r_copies() -> None:
    c = core()
    a1 = stores(c.append(batch(3), "t1", 0.0, 1000))
    a2 = stores(c.append(batch(2), "t2", 0.0, 1000))
    assert len(a1) == 2
    assert len({s.node_id for s in a1}) == 2
    assert a1[0].message.batch.lsns() == [(EPOCH << 32) | 1, (EPOCH << 32) | 2, (EPOCH << 32) | 3]
    assert a2[0].message.batch.lsns()[0] == (EPOCH << 32) | 4
    assert a1[0].message.batch.timestamps() == [1000] * 3
    # One copy is not enough.
    assert c.on_stored(a1[0].message.store_id, a1[0].node_id, Status.OK, 0.0) == []
    out = c.on_stored(a1[1].message.store_id, a1[1].node_id, Status.OK, 0.0)
    reply = next(a for a in out if isinstance(a, ReplyAppend))
    assert (reply.token, reply.status, reply.first_lsn, reply.count) == (
        "t1",
        Status.OK,
        (EPOCH << 32) | 1,
        3,
    )
    release = next(a for a in out if isinstance(a, SendRelease))
    assert release.lsn == (EPOCH << 32) | 3


def test_release_waits_for_the_whole_prefix() -> None:
    c = core()
    a1 = stores(c.append(batch(1), "t1", 0.0, 0))
    a2 = stores(c.append(batch(1), "t2", 0.0, 0))
    out = ack_all(c, a2)
    assert [a.token for a in out if isinstance(a, ReplyAppend)] == ["t2"]
    assert not [a for a in out if isinstance(a, SendRelease)]  # ESN 1 is not stored yet
    out = ack_all(c, a1)
    assert [a.lsn for a in out if isinstance(a, SendRelease)] == [(EPOCH << 32) | 2]
    assert c.idle
    stats = c.stats()
    assert (stats.next_esn, stats.last_known_good, stats.appenders_in_flight) == (3, 2, 0)
    assert stats.released_lsn == (EPOCH << 32) | 2


def test_nothing_is_released_before_recovery() -> None:
    c = core(recovered=False)
    out = ack_all(c, stores(c.append(batch(1), "t", 0.0, 0)))
    assert [a.status for a in out if isinstance(a, ReplyAppend)] == [Status.OK]
    assert not [a for a in out if isinstance(a, SendRelease)]
    assert [a.lsn for a in c.set_recovered() if isinstance(a, SendRelease)] == [(EPOCH << 32) | 1]


def test_failed_node_gets_a_new_wave_without_it() -> None:
    c = core()
    first = stores(c.append(batch(1), "t", 0.0, 0))
    bad = first[0].node_id
    out = stores(c.on_stored(first[0].message.store_id, bad, Status.NOSPC, 0.0))
    assert len(out) == 2
    assert bad not in {s.node_id for s in out}
    assert out[0].message.wave == 2
    # The old wave's answers no longer count.
    assert c.on_stored(first[1].message.store_id, first[1].node_id, Status.OK, 0.0) == []
    replies = [a for a in ack_all(c, out) if isinstance(a, ReplyAppend)]
    assert [r.status for r in replies] == [Status.OK]


def test_store_timeout_starts_a_new_wave() -> None:
    c = core(store_timeout_s=1.0)
    first = stores(c.append(batch(1), "t", 0.0, 0))
    assert c.next_deadline() == 1.0
    assert c.tick(0.5) == []
    c.on_stored(first[0].message.store_id, first[0].node_id, Status.OK, 0.6)
    again = stores(c.tick(1.0))
    assert len(again) == 2
    slow = first[1].node_id
    assert slow not in {s.node_id for s in again}
    assert c.next_deadline() == 1.0 + 2.0  # backoff doubles the timeout


def test_full_window_is_overloaded_not_queued() -> None:
    c = core(appenders_max=2)
    c.append(batch(1), "a", 0.0, 0)
    c.append(batch(1), "b", 0.0, 0)
    out = c.append(batch(1), "c", 0.0, 0)
    assert [(a.token, a.status) for a in out if isinstance(a, ReplyAppend)] == [
        ("c", Status.OVERLOADED)
    ]


def test_preempted_store_fails_everything_pending() -> None:
    c = core()
    s1 = stores(c.append(batch(1), "a", 0.0, 0))
    c.append(batch(1), "b", 0.0, 0)
    out = c.on_stored(s1[0].message.store_id, s1[0].node_id, Status.PREEMPTED, 0.0)
    assert sorted((a.token, a.status) for a in out if isinstance(a, ReplyAppend)) == [
        ("a", Status.PREEMPTED),
        ("b", Status.PREEMPTED),
    ]
    assert c.preempted
    assert c.idle
    assert c.append(batch(1), "c", 0.0, 0)[0].status == Status.PREEMPTED  # type: ignore[union-attr]


def test_dead_node_is_replaced_at_once() -> None:
    c = core(r=2, nodes=3)
    s1 = stores(c.append(batch(1), "a", 0.0, 0))
    dead = s1[0].node_id
    out = stores(c.on_node_down(dead, 0.1))
    assert out
    assert dead not in {s.node_id for s in out}
    for s in stores(c.append(batch(1), "c", 0.2, 0)):
        assert s.node_id != dead


def test_not_enough_nodes_waits_and_retries() -> None:
    c = core(r=2, nodes=2, retry_wait_s=0.5)
    c.on_node_down(1, 0.0)
    assert stores(c.append(batch(1), "a", 0.0, 0)) == []
    assert c.next_deadline() == 0.5
    c.on_node_up(1)
    assert len(stores(c.tick(0.5))) == 2


@settings(max_examples=200)
@given(st.integers(0, 2**32), st.lists(st.integers(1, 4), min_size=1, max_size=12))
def test_random_schedules_keep_the_rules(seed: int, sizes: list[int]) -> None:
    """Acks, failures and timeouts in random order: LSNs unique and in order,
    OK only after R copies of one wave, release never past an unstored LSN."""
    rng = random.Random(seed)
    c = core(r=2, nodes=5, store_timeout_s=1.0)
    now = 0.0
    inflight: list[SendStore] = []
    acked_ok: dict[str, tuple[int, int]] = {}
    stored_copies: dict[int, set[int]] = {}
    released = 0
    for i, n in enumerate(sizes):
        inflight += stores(c.append(batch(n), f"t{i}", now, 0))
    for _ in range(500):
        if not inflight and c.idle:
            break
        now += rng.random() * 0.3
        if inflight and rng.random() < 0.8:
            s = inflight.pop(rng.randrange(len(inflight)))
            status = Status.OK if rng.random() < 0.85 else Status.FAILED
            if status == Status.OK:
                for lsn in s.message.batch.lsns():
                    stored_copies.setdefault(lsn, set()).add(s.node_id)
            out = c.on_stored(s.message.store_id, s.node_id, status, now)
        else:
            out = c.tick(now)
        for a in out:
            if isinstance(a, SendStore):
                inflight.append(a)
            elif isinstance(a, ReplyAppend):
                assert a.status == Status.OK
                assert a.token not in acked_ok
                acked_ok[a.token] = (a.first_lsn, a.count)
                for lsn in range(a.first_lsn, a.first_lsn + a.count):
                    assert len(stored_copies[lsn]) >= 2
            elif isinstance(a, SendRelease):
                assert a.lsn > released
                released = a.lsn
                for lsn in range((EPOCH << 32) | 1, a.lsn + 1):
                    assert len(stored_copies.get(lsn, ())) >= 2
    spans = sorted(acked_ok.values())
    for (f1, n1), (f2, _) in itertools.pairwise(spans):
        assert f1 + n1 <= f2  # no LSN handed out twice


def test_stores_never_carry_more_than_is_released() -> None:
    """Nodes take a STORE's known-good LSN as released: before recovery of the
    earlier epochs is done, that must stay 0 however far the LNG runs ahead."""
    c = core(recovered=False)
    ack_all(c, stores(c.append(batch(3), "t1", 0.0, 1000)))
    assert c.last_known_good_lsn == (EPOCH << 32) | 3
    later = stores(c.append(batch(1), "t2", 0.0, 1000))
    assert {s.message.released_lsn for s in later} == {0}
    c.set_recovered()
    ack_all(c, later)
    again = stores(c.append(batch(1), "t3", 0.0, 1000))
    assert {s.message.released_lsn for s in again} == {(EPOCH << 32) | 4}


def test_a_late_reply_to_an_earlier_core_is_not_taken_for_a_later_ones() -> None:
    """Found by the simulation: a node that ran epoch 5 and then epoch 7 of a
    log got epoch 5's late STORE replies routed to the epoch 7 core, whose
    first STORE had the same id, and acknowledged an append with one copy."""
    ids = itertools.count(1)
    old = core(ids=ids)
    old_sent = stores(old.append(batch(1), "old", 0.0, 1000))
    new = core(ids=ids)
    new_sent = stores(new.append(batch(1), "new", 0.0, 1000))
    assert {s.message.store_id for s in old_sent}.isdisjoint(s.message.store_id for s in new_sent)
    # Both of the old core's copies answer, and reach the new core.
    late = [new.on_stored(s.message.store_id, s.node_id, Status.OK, 0.0) for s in old_sent]
    assert late == [[], []]
    assert not new.idle


def test_nodes_that_refuse_at_once_never_make_waves_spin() -> None:
    """A STORE to a node that refuses connections fails at once, and the shell
    answers for it at once.  Once every candidate failed, the next wave waits
    (a new wave on the same nodes at once recursed until the node crashed)."""
    c = core(r=2, nodes=3, retry_wait_s=0.2)
    queue = stores(c.append(batch(1), "t", 0.0, 0))
    sent = 0
    while queue:
        s = queue.pop(0)
        sent += 1
        assert sent < 10, "waves spin on nodes that refuse"
        queue += stores(c.on_stored(s.message.store_id, s.node_id, Status.CONNFAILED, 0.0))
    assert c.next_deadline() == 0.2
    assert stores(c.tick(0.2))  # then every node gets another chance


def test_only_waves_that_timed_out_lengthen_the_next() -> None:
    c = core(r=2, nodes=5, store_timeout_s=1.0)
    first = stores(c.append(batch(1), "t", 0.0, 0))
    refused = stores(c.on_stored(first[0].message.store_id, first[0].node_id, 5, 0.0))
    assert refused
    assert c.next_deadline() == 1.0  # a refusal is not slowness
    assert stores(c.tick(1.0))  # timed out: the next wave gets twice as long
    assert c.next_deadline() == 3.0

"""Idempotent appends in the pure parts: the producer table's verdicts, the
sequencer core's answers to retried batches, and what recovery keeps."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.batch import PackedBatch
from logstrand.epochstore import LogAttributes
from logstrand.errors import Status
from logstrand.idempotence import DERIVED_BIT, Producers, Sent, Verdict, derived_id
from logstrand.idempotence._recovery import kept
from logstrand.placement import CopysetSelector
from logstrand.records import kafka_producer_key, kafka_producer_of
from logstrand.sequencer import ConfirmRefusal, ReplyAppend, SendStore, SequencerCore
from logstrand.sequencer._host import Activate, SequencerHostCore

EPOCH = 3


def batch(n: int, producer: tuple[int, int] | None) -> PackedBatch:
    return PackedBatch.for_append([None] * n, [b"x"] * n, producer=producer)


def core(**kw: object) -> SequencerCore:
    sel = CopysetSelector((1, 2, 3, 4), 2, rng=random.Random(1))
    return SequencerCore(7, EPOCH, sel, **kw)  # type: ignore[arg-type]


def replies(actions: list[object]) -> list[ReplyAppend]:
    return [a for a in actions if isinstance(a, ReplyAppend)]


def store_all(c: SequencerCore, actions: list[object]) -> list[object]:
    out: list[object] = []
    for s in [a for a in actions if isinstance(a, SendStore)]:
        out += c.on_stored(s.message.store_id, s.node_id, Status.OK, 0.0)
    return out


def test_verdicts() -> None:
    p = Producers(window=3)
    assert p.check(9, 0, 2) == (Verdict.NEW, None)
    assert p.check(9, 4, 2)[0] is Verdict.UNKNOWN
    for seq in (0, 2, 4, 6):
        p.add(9, Sent(seq, 2, 100 + seq, 5))
    assert p.check(9, 8, 1)[0] is Verdict.NEW
    assert p.check(9, 4, 2) == (Verdict.DUPLICATE, Sent(4, 2, 104, 5))
    assert p.check(9, 4, 3)[0] is Verdict.OUT_OF_SEQUENCE  # other boundaries
    assert p.check(9, 9, 1)[0] is Verdict.OUT_OF_SEQUENCE  # a gap
    assert p.check(9, 0, 2)[0] is Verdict.OLD_DUPLICATE  # below the window of 3
    assert p.check(9, 8, 1, now_ms=10_000, expiry_ms=1000)[0] is Verdict.UNKNOWN  # expired
    assert len(p) == 0


def test_a_batch_stored_again_later_is_known_at_its_later_lsn() -> None:
    """A node stored a batch at e20n1 (never acknowledged; the next recovery
    plugged it), then the client's retry of it at e22n4.  Its table must name
    e22n4: recovery keeps an entry only where its records are, and with the
    first entry kept, the retry that recovery decided a record had none, so
    the next sequencer took the batch as new (test_partitions read it twice)."""
    e20, e22 = (20 << 32) | 1, (22 << 32) | 4
    node = Producers()
    node.add(9, Sent(0, 5, (19 << 32) | 1, 1))
    node.add(9, Sent(5, 5, e20, 2))
    node.add(9, Sent(5, 5, e22, 3))
    assert node.sent(9)[-1] == Sent(5, 5, e22, 3)
    node.add(9, Sent(5, 5, e20, 2))  # a late copy of the earlier attempt changes nothing
    assert node.sent(9)[-1].lsn == e22
    # Recovery of epoch 22 decided ESNs 4..8 records: the entry is kept ...
    kept22 = list(
        kept([(p, s) for p, s in node.entries() if s.lsn >> 32 == 22], 0, frozenset(range(4, 9)))
    )
    assert kept22 == [(9, Sent(5, 5, e22, 3))]
    # ... and the next sequencer answers the retry with those LSNs.
    table = Producers()
    table.update(kept22)
    assert table.check(9, 5, 5) == (Verdict.DUPLICATE, Sent(5, 5, e22, 3))


@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4)), max_size=60))
def test_table_round_trips_and_stays_bounded(adds: list[tuple[int, int]]) -> None:
    p = Producers(producers_max=3, window=2)
    seqs: dict[int, int] = {}
    for t, (pid, n) in enumerate(adds):
        p.add(pid, Sent(seqs.get(pid, 0), n, 1000 + t, t))
        seqs[pid] = seqs.get(pid, 0) + n
    assert len(p) <= 3
    assert all(len(p.sent(pid)) <= 2 for pid in seqs)
    again = Producers(producers_max=3, window=2)
    again.update(Producers.unpack_entries(p.pack()))
    assert again == p
    assert Producers.from_json(p.to_json(), producers_max=3, window=2) == p


def test_a_retry_in_flight_and_after_gets_the_same_lsns_and_stores_nothing() -> None:
    c = core()
    first = c.append(batch(3, (5, 0)), "a", 0.0, 1000)
    again = c.append(batch(3, (5, 0)), "a-retry", 0.0, 1001)
    assert again == []  # answered with the first, when it completes
    done = replies(store_all(c, first))
    assert [(r.token, r.status, r.first_lsn) for r in done] == [
        ("a", Status.OK, (EPOCH << 32) | 1),
        ("a-retry", Status.OK, (EPOCH << 32) | 1),
    ]
    late = replies(c.append(batch(3, (5, 0)), "a-late", 0.0, 1002))
    assert [(r.status, r.first_lsn, r.count) for r in late] == [(Status.OK, (EPOCH << 32) | 1, 3)]
    nxt = c.append(batch(1, (5, 3)), "b", 0.0, 1003)
    assert replies(store_all(c, nxt))[0].first_lsn == (EPOCH << 32) | 4


def refusal(actions: list[object]) -> tuple[Status, bool]:
    """The refusal among ``actions``, and whether it waits for the epoch check."""
    (a,) = actions
    if isinstance(a, ConfirmRefusal):
        return a.reply.status, True
    assert isinstance(a, ReplyAppend)
    return a.status, False


def test_refusals_name_their_reason_and_those_ahead_wait_for_the_epoch_check() -> None:
    c = core()
    assert refusal(c.append(batch(1, (5, 2)), "t", 0.0, 0)) == (Status.UNKNOWN_PRODUCER, True)
    store_all(c, c.append(batch(2, (5, 0)), "t", 0.0, 0))
    # A gap after the table's last batch: a newer sequencer may hold record 2.
    assert refusal(c.append(batch(1, (5, 3)), "t", 0.0, 0)) == (Status.OUT_OF_SEQUENCE, True)
    # Other boundaries inside the table: no newer sequencer changes that.
    assert refusal(c.append(batch(1, (5, 1)), "t", 0.0, 0)) == (Status.OUT_OF_SEQUENCE, False)


def test_a_kafka_producer_below_its_fence_is_refused_and_others_are_not() -> None:
    """A marker numbered under the fence key of producer 9 at epoch 2 (a
    newer producer of its transactional id aborted the old one's
    transaction) fences epochs 0 and 1 in this log, at once; epoch 3 and
    other producers are not touched, nor ids that are not Kafka keys."""
    c = core()
    old = kafka_producer_key(9, 1)
    store_all(c, c.append(batch(2, (old, 0)), "t", 0.0, 0))
    fence = kafka_producer_key(9, 2, fence=True)
    store_all(c, c.append(batch(1, (fence, 0)), "marker", 0.0, 0))
    assert refusal(c.append(batch(1, (old, 2)), "zombie", 0.0, 0)) == (Status.FENCED, False)
    assert refusal(c.append(batch(1, (kafka_producer_key(9, 0), 0)), "t", 0.0, 0)) == (
        Status.FENCED,
        False,
    )
    for fresh in (kafka_producer_key(9, 3), kafka_producer_key(8, 0), 9, 9 << 16 | 1):
        done = replies(store_all(c, c.append(batch(1, (fresh, 0)), "t", 0.0, 0)))
        assert [r.status for r in done] == [Status.OK], fresh
    # The fence is the table's: a table rebuilt from its entries keeps it,
    # and one that evicted every key of the producer drops it.
    table = Producers.from_json(c.producers.to_json())
    assert table.check(old, 2, 1)[0] is Verdict.FENCED
    small = Producers(producers_max=2)
    small.add(fence, Sent(0, 1, 10, 0))
    assert small.check(old, 2, 1)[0] is Verdict.FENCED
    small.add(1, Sent(0, 1, 11, 0))
    small.add(2, Sent(0, 1, 12, 0))  # the fence key goes
    assert small.check(old, 0, 1)[0] is Verdict.NEW


def test_a_sealed_sequencer_does_not_refuse_what_its_successor_took() -> None:
    """Epoch 3 knows the producer's batches up to record 27; a newer epoch
    took record 28 and died.  The stale sequencer, not yet told it was
    sealed, must not refuse record 29 as out of sequence: once the store
    says a newer epoch exists it steps down and the batch waits for a new
    sequencer (whose recovery brings record 28)."""
    host = SequencerHostCore(1)
    attrs_ = LogAttributes(replication_factor=2)
    (activate,) = host.on_append(7, batch(28, (5, 0)), "first", 0.0, 0, owner=1, attributes=attrs_)
    assert isinstance(activate, Activate)
    c = core(recovered=False)
    out = host.on_activated(7, c, 0.0, 0)
    known = Producers()
    known.add(5, Sent(0, 28, (2 << 32) | 1, 0))  # records 0..27
    out = host.on_recovery_done(7, c, True, known, 0.0, 0)
    first = replies(out)
    assert [(r.token, r.status) for r in first] == [("first", Status.OK)]  # a duplicate
    (check,) = host.on_append(7, batch(1, (5, 29)), "b29", 0.0, 0, owner=1, attributes=attrs_)
    assert isinstance(check, ConfirmRefusal)
    assert check.reply.status == Status.OUT_OF_SEQUENCE
    # No newer epoch: the refusal stands.
    assert host.on_refusal_checked(check, EPOCH + 1) == [check.reply]
    # A newer epoch was handed out: step down, and activate again for the batch.
    (check,) = host.on_append(7, batch(1, (5, 29)), "b29", 0.0, 0, owner=1, attributes=attrs_)
    out = host.on_refusal_checked(check, EPOCH + 2)
    assert c.preempted
    assert [a for a in out if isinstance(a, Activate)] == [Activate(7)]
    assert not replies(out)  # the batch waits for the new sequencer


def test_idempotent_appends_wait_for_the_table_of_the_earlier_epochs() -> None:
    c = core(recovered=False)
    assert c.append(batch(1, (5, 4)), "held", 0.0, 0) == []  # unknown yet: it waits
    plain = c.append(batch(1, None), "plain", 0.0, 0)  # no producer: taken at once
    assert [a for a in plain if isinstance(a, SendStore)]
    known = Producers()
    known.add(5, Sent(0, 4, (2 << 32) | 7, 0))
    out = c.set_recovered(known, 0.0, 0)
    assert [a for a in out if isinstance(a, SendStore)], "the held append is stored now"
    dup = replies(c.append(batch(4, (5, 0)), "dup", 0.0, 0))
    assert (dup[0].status, dup[0].first_lsn) == (Status.OK, (2 << 32) | 7)


def test_preemption_answers_held_and_attached_appends() -> None:
    c = core(recovered=False)
    c.append(batch(1, (5, 0)), "held", 0.0, 0)
    assert {r.token: r.status for r in replies(c.preempt())} == {"held": Status.PREEMPTED}


def test_derived_ids_are_stable_apart_and_outside_the_handed_out_range() -> None:
    a = derived_id("query-1", 3, 17)
    assert a == derived_id("query-1", 3, 17)
    assert a != derived_id("query-1", 4, 17)
    assert a & DERIVED_BIT


def test_recovery_keeps_only_batches_that_are_in_the_log() -> None:
    e = 4 << 32
    entries = [
        (1, Sent(0, 2, e | 1, 0)),  # at or below the LNG (3): fully stored
        (1, Sent(2, 2, e | 4, 0)),  # ESNs 4, 5 decided RECORD
        (2, Sent(0, 1, e | 6, 0)),  # ESN 6 plugged with a hole
    ]
    assert [p for p, _ in kept(entries, 3, frozenset({4, 5}))] == [1, 1]


@pytest.mark.parametrize("seed", range(20))
def test_the_fence_follows_the_table_as_producers_come_and_go(seed: int) -> None:
    """The epochs behind the fence are counted as keys come and go (not
    found again by a scan): after any adds, evictions, expiries and
    checks they are what the table's keys say."""
    rng = random.Random(seed)
    table = Producers(producers_max=6, window=2)
    now = 0
    for _ in range(300):
        now += rng.randint(0, 50)
        pid, epoch = rng.randint(1, 3), rng.randint(0, 3)
        key = kafka_producer_key(pid, epoch, fence=rng.random() < 0.2)
        if rng.random() < 0.1:
            key = rng.randint(1, 5)  # not a Kafka key
        step = rng.random()
        if step < 0.6:
            table.add(key, Sent(rng.randint(0, 3), 1, now, now))
        elif step < 0.8:
            table.expire(now, expiry_ms=500)
        else:
            table.check(key, 0, 1, now, expiry_ms=500)
        want: dict[int, dict[int, int]] = {}
        for k in dict(table.entries()):
            kafka = kafka_producer_of(k)
            if kafka is not None:
                per = want.setdefault(kafka[0], {})
                per[kafka[1]] = per.get(kafka[1], 0) + 1
        assert table._epochs == want

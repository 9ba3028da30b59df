"""Recovery decisions from digests, by hand and at random."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import pack_extra
from logstrand.errors import Status
from logstrand.idempotence._model import Sent
from logstrand.placement import CopysetSelector
from logstrand.records import CONTROL, FLAGS_APPENDED, TRANSACTIONAL, RecordFlags
from logstrand.sequencer._commands import StoreCopies
from logstrand.sequencer._decisions import write_decisions
from logstrand.sequencer._recovery import (
    Decision,
    DigestRecord,
    EpochRecovery,
    Standing,
    quorum,
)
from logstrand.transactions import producer_key
from logstrand.types import compose_lsn


def rec(esn: int, payload: bytes = b"x", wave: int = 1, flags: int = 0) -> DigestRecord:
    return DigestRecord(esn, flags, wave, 1000 + esn, None, payload)


def test_records_holes_and_bridge() -> None:
    r = EpochRecovery(7, 3, (1, 2, 3), 2, seal_epoch=4, lng_esn=2)
    r.on_digest(1, [rec(1), rec(3, b"a"), rec(5, b"c")], complete=True)
    assert not r.ready
    r.on_digest(2, [rec(3, b"a"), rec(4, b"b")], complete=False)
    assert not r.ready  # node 2 has more to send
    r.on_digest(2, [], complete=True)
    assert r.ready
    plan = [(m.esn, m.decision, m.payload) for m in r.decide()]
    assert plan == [
        (3, Decision.RECORD, b"a"),
        (4, Decision.RECORD, b"b"),
        (5, Decision.RECORD, b"c"),
        (6, Decision.BRIDGE, None),
    ]


def test_an_empty_epoch_gets_a_bridge_at_lng_plus_one() -> None:
    r = EpochRecovery(7, 3, (1, 2, 3), 2, seal_epoch=4, lng_esn=10)
    r.on_digest(1, [], complete=True)
    r.on_digest(3, [], complete=True)
    assert [(m.esn, m.decision) for m in r.decide()] == [(11, Decision.BRIDGE)]


def test_missing_esn_between_records_is_a_hole() -> None:
    r = EpochRecovery(7, 1, (1, 2, 3), 2, seal_epoch=2)
    r.on_digest(1, [rec(1), rec(3)], complete=True)
    r.on_digest(2, [rec(1), rec(3)], complete=True)
    assert [m.decision for m in r.decide()] == [
        Decision.RECORD,
        Decision.HOLE,
        Decision.RECORD,
        Decision.BRIDGE,
    ]


def test_a_later_recovery_beats_the_epoch_sequencer_and_an_earlier_recovery() -> None:
    r = EpochRecovery(7, 1, (1, 2, 3), 2, seal_epoch=9)
    # ESN 1: an old copy (wave 5) and a hole plug written by recovery at seal 3.
    r.on_digest(1, [rec(1, b"old", wave=5)], complete=True)
    r.on_digest(
        2,
        [rec(1, b"", wave=3, flags=RecordFlags.HOLE | RecordFlags.WRITTEN_BY_RECOVERY)],
        complete=True,
    )
    # ESN 2: two recoveries wrote different things; the later one (seal 6) wins.
    r.on_digest(3, [rec(2, b"r6", wave=6, flags=RecordFlags.WRITTEN_BY_RECOVERY)], complete=False)
    r.on_digest(1, [rec(2, b"r4", wave=4, flags=RecordFlags.WRITTEN_BY_RECOVERY)], complete=True)
    plan = r.decide()
    assert plan[0].decision is Decision.HOLE
    assert (plan[1].decision, plan[1].payload) == (Decision.RECORD, b"r6")
    assert plan[1].flags & RecordFlags.WRITTEN_BY_RECOVERY


def test_decide_refuses_before_an_f_majority() -> None:
    r = EpochRecovery(7, 1, (1, 2, 3, 4, 5), 2, seal_epoch=2)
    for n in (1, 2, 3):
        r.on_digest(n, [], complete=True)
    assert not r.ready  # 5 - 2 + 1 = 4 needed
    with pytest.raises(AssertionError):
        r.decide()


def test_a_node_being_rebuilt_does_not_shrink_the_quorum() -> None:
    """Node 4 is being rebuilt; a batch on {4, 1} has its one live copy on
    node 1.  Answers from 2 and 3 do not meet that copyset: leaving node 4
    out of the nodeset (the old rule: 3 - 2 + 1 = 2 answers) sealed without
    node 1, and its producer entry was lost.  Every other node answering is
    enough, or any three (node 4 counted as silent)."""
    nodes, rebuilding = (1, 2, 3, 4), Standing(untrusted=frozenset({4}))
    assert not quorum(nodes, 2, {2, 3}, rebuilding)
    assert quorum(nodes, 2, {1, 2, 3}, rebuilding)
    assert not quorum(nodes, 2, {2, 3, 4}, rebuilding)  # its "not here" counts for nothing
    # Rebuilt (empty): its copies are elsewhere now, the copysets amended.
    assert quorum(nodes, 2, {2, 3}, Standing(empty=frozenset({4})))
    # Two silent, neither being rebuilt: a copyset of both may hide.
    assert not quorum(nodes, 2, {2, 3})
    assert quorum(nodes, 2, {1, 2, 3})
    # Everyone counted is being rebuilt: nothing to decide from.
    assert not quorum((1, 2), 2, set(), Standing(untrusted=frozenset({1, 2})))
    r = EpochRecovery(7, 1, nodes, 2, seal_epoch=2, standing=rebuilding)
    for n in (2, 3):
        r.on_digest(n, [], complete=True)
    assert not r.ready
    r.on_digest(1, [], complete=True)
    assert r.ready


@settings(max_examples=300)
@given(
    st.integers(0, 2**32),
    st.integers(3, 6),
    st.integers(1, 3),
    st.integers(0, 30),
    st.integers(0, 5),
)
def test_acknowledged_records_always_survive(
    seed: int, n: int, r: int, esns: int, lng: int
) -> None:
    """Whatever f-majority answers: every acknowledged ESN (R copies) is kept
    with its content; ESNs with no copy on the answering nodes become holes."""
    rng = random.Random(seed)
    r = min(r, n)
    nodeset = tuple(range(1, n + 1))
    holdings: dict[int, list[DigestRecord]] = {x: [] for x in nodeset}
    acked = set()
    for esn in range(lng + 1, lng + 1 + esns):
        if rng.random() < 0.6:
            acked.add(esn)
            holders = rng.sample(nodeset, r)  # fully stored: acknowledged
        else:
            holders = rng.sample(nodeset, rng.randint(0, r - 1))  # partial: never acked
        for h in holders:
            holdings[h].append(rec(esn, b"p%d" % esn))
    answering = rng.sample(nodeset, n - r + 1)
    rc = EpochRecovery(1, 2, nodeset, r, seal_epoch=3, lng_esn=lng)
    for node in answering:
        rc.on_digest(node, holdings[node], complete=True)
    plan = rc.decide()
    assert [m.esn for m in plan] == list(range(lng + 1, lng + 1 + len(plan)))
    assert plan[-1].decision is Decision.BRIDGE
    decided = {m.esn: m for m in plan}
    for esn in acked:
        assert decided[esn].decision is Decision.RECORD
        assert decided[esn].payload == b"p%d" % esn
    seen = {x.esn for node in answering for x in holdings[node]}
    for m in plan[:-1]:
        assert (m.decision is Decision.RECORD) == (m.esn in seen)


def test_a_record_recovery_writes_again_keeps_its_headers() -> None:
    """Headers and create times (a record's extras) are part of the record:
    recovery re-stores them with the key and payload it decided on."""
    extra = pack_extra(42, [("trace", b"abc")])
    r = EpochRecovery(7, 3, (1, 2, 3), 2, seal_epoch=4, lng_esn=0)
    r.on_digest(1, [DigestRecord(1, 0, 1, 1001, b"k", b"a", extra), rec(2)], complete=True)
    r.on_digest(2, [], complete=True)
    plan = r.decide()
    assert [m.extra for m in plan[:2]] == [extra, None]
    steps = write_decisions(
        7, 3, 4, plan, CopysetSelector((1, 2, 3), 2), lambda: {1, 2, 3}, 10**13, 1.0
    )
    command = next(steps)
    assert isinstance(command, StoreCopies)
    assert command.message.batch.extras() == [extra, None, None]


def _stored(plan: list[Any], owners: list[Any]) -> list[Any]:
    """The batches ``write_decisions`` stores for ``plan``, every STORE
    answered OK."""
    steps = write_decisions(
        7, 3, 4, plan, CopysetSelector((1, 2, 3), 2), lambda: {1, 2, 3}, 10**13, 1.0, [], owners
    )
    out = []
    try:
        command = next(steps)
        while True:
            assert isinstance(command, StoreCopies)
            out.append(command.message.batch)
            command = steps.send(dict.fromkeys(command.message.copyset, Status.OK))
    except StopIteration:
        return out


def test_a_transactions_records_and_markers_stay_theirs_when_written_again() -> None:
    """A record recovery writes again keeps its appender flags, and a run of
    a transaction's records is stored by itself under its producer: readers
    learn from a batch's first record whether its records are a
    transaction's, and from its producer whose.  (Before, a re-stored
    aborted record passed for a plain one, and a re-stored marker for a
    record: the simulation's committed readers caught both.)"""
    pid = producer_key(900, 0)
    r = EpochRecovery(7, 3, (1, 2, 3), 2, seal_epoch=4, lng_esn=0)
    copies = [
        rec(1, b"plain"),
        rec(2, b"t1", flags=TRANSACTIONAL),
        rec(3, b"t2", flags=TRANSACTIONAL),
        rec(4, b"marker", flags=CONTROL),
        rec(5, b"other", flags=TRANSACTIONAL),
        rec(6, b"plain-again"),
    ]
    r.on_digest(1, copies, complete=True)
    r.on_digest(2, [], complete=True)
    plan = r.decide()
    assert [m.appended for m in plan[:6]] == [
        0,
        TRANSACTIONAL,
        TRANSACTIONAL,
        CONTROL,
        TRANSACTIONAL,
        0,
    ]
    # ESNs 2-3 are one batch of the producer (from 10), ESN 5 another's.
    owners = [
        (pid, Sent(10, 2, compose_lsn(3, 2), 0)),
        (producer_key(901, 0), Sent(0, 1, compose_lsn(3, 5), 0)),
        (pid, Sent(0, 5, compose_lsn(2, 2), 0)),  # another epoch's: not these
    ]
    batches = _stored(plan, owners)
    shapes = [(b.flags0 & FLAGS_APPENDED, b.producer, b.columns().payloads) for b in batches]
    assert shapes == [
        (0, None, [b"plain"]),
        (TRANSACTIONAL, (pid, 10), [b"t1", b"t2"]),
        (CONTROL, None, [b"marker"]),
        (TRANSACTIONAL, (producer_key(901, 0), 0), [b"other"]),
        (0, None, [b"plain-again", None]),  # the bridge rides with it
    ]
    # A plain epoch is one STORE, as before.
    r = EpochRecovery(7, 3, (1, 2, 3), 2, seal_epoch=4, lng_esn=0)
    r.on_digest(1, [rec(1), rec(2)], complete=True)
    r.on_digest(2, [], complete=True)
    assert len(_stored(r.decide(), owners)) == 1

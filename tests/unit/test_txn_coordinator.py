"""The transaction coordinator's rules (``transactions._coordinator``),
driven with a fake clock: producers and fencing, the states and their
markers, timeouts, retries, a coordinator that takes over, and a seeded run
of producers coming, writing, committing, aborting and going silent."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from logstrand.transactions import EPOCH_MAX, State, TxnCoordinator, TxnError


def _coordinator() -> TxnCoordinator:
    ids = itertools.count(1000)
    return TxnCoordinator(lambda: next(ids), max_timeout_ms=60_000)


def _open(c: TxnCoordinator, tid: str, logs: set[int], timeout_ms: int = 10_000) -> tuple[int, int]:
    """A producer of ``tid`` at time 0, its transaction open on ``logs`` at
    time 1: its producer id and epoch."""
    code, txn, _ = c.init_producer_id(0.0, tid, timeout_ms)
    assert code == TxnError.NONE
    assert txn is not None
    assert c.add_logs(1.0, tid, txn.producer_id, txn.producer_epoch, logs) == TxnError.NONE
    return txn.producer_id, txn.producer_epoch


def test_a_producer_commits_and_its_markers_go_to_every_log_it_wrote() -> None:
    c = _coordinator()
    code, txn, _ = c.init_producer_id(0.0, "t", 10_000)
    assert code == TxnError.NONE
    assert txn is not None
    pid, epoch = txn.producer_id, txn.producer_epoch
    assert (pid, epoch) == (1000, 0)
    assert c.add_logs(1.0, "t", pid, epoch, {5, 6}) == TxnError.NONE
    assert c.add_logs(1.5, "t", pid, epoch, {7}) == TxnError.NONE
    assert c.txns["t"].state == State.ONGOING
    code, markers = c.end("t", pid, epoch, commit=True)
    assert code == TxnError.NONE
    assert markers is not None
    assert (markers.commit, markers.logs, markers.producer_epoch) == (True, {5, 6, 7}, 0)
    # Until the markers are in, the id waits (rule 3).
    assert c.add_logs(2.0, "t", pid, epoch, {5}) == TxnError.CONCURRENT_TRANSACTIONS
    assert c.pending() == [markers]
    c.markers_written(markers)
    assert c.txns["t"].state == State.COMPLETE_COMMIT
    # A lost answer's retry is answered the same; the other way is refused.
    assert c.end("t", pid, epoch, commit=True) == (TxnError.NONE, None)
    assert c.end("t", pid, epoch, commit=False)[0] == TxnError.INVALID_TXN_STATE
    # The next transaction starts with the next log.
    assert c.add_logs(3.0, "t", pid, epoch, {9}) == TxnError.NONE
    assert c.txns["t"].logs == {9}


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction() -> None:
    c = _coordinator()
    pid, epoch = _open(c, "t", {5})
    code, txn, markers = c.init_producer_id(2.0, "t", 10_000)
    assert (code, txn) == (TxnError.CONCURRENT_TRANSACTIONS, None)
    assert markers is not None
    assert (markers.commit, markers.producer_epoch, markers.logs) == (False, epoch + 1, {5})
    # The old producer is fenced at once, whatever it asks.
    assert c.add_logs(2.1, "t", pid, epoch, {6}) == TxnError.PRODUCER_FENCED
    assert c.end("t", pid, epoch, commit=True)[0] == TxnError.PRODUCER_FENCED
    assert c.init_producer_id(2.2, "t", 10_000)[0] == TxnError.CONCURRENT_TRANSACTIONS
    c.markers_written(markers)
    code, txn, _ = c.init_producer_id(2.3, "t", 10_000)
    assert code == TxnError.NONE
    assert txn is not None
    assert (txn.producer_id, txn.producer_epoch) == (pid, epoch + 2)
    assert c.add_logs(3.0, "t", 7777, txn.producer_epoch, {5}) == (
        TxnError.INVALID_PRODUCER_ID_MAPPING
    )
    assert c.add_logs(3.0, "t", pid, txn.producer_epoch + 1, {5}) == TxnError.INVALID_PRODUCER_EPOCH


def test_a_silent_producers_transaction_is_aborted_after_its_timeout() -> None:
    c = _coordinator()
    pid, epoch = _open(c, "t", {5}, timeout_ms=5_000)
    assert c.next_deadline() == pytest.approx(6.0)
    assert c.tick(5.9) == []
    (markers,) = c.tick(6.0)
    assert (markers.commit, markers.producer_epoch) == (False, epoch + 1)
    c.markers_written(markers)
    assert c.txns["t"].state == State.COMPLETE_ABORT
    assert c.end("t", pid, epoch, commit=True)[0] == TxnError.PRODUCER_FENCED


def test_an_operator_aborts_an_open_transaction_and_fences_its_producer() -> None:
    c = _coordinator()
    assert c.abort_now("t")[0] == TxnError.INVALID_PRODUCER_ID_MAPPING  # no such id
    pid, epoch = _open(c, "t", {5, 6})
    code, markers = c.abort_now("t")
    assert code == TxnError.NONE
    assert markers is not None
    assert (markers.commit, markers.producer_epoch, markers.logs) == (False, epoch + 1, {5, 6})
    # Decided, markers out: a second abort waits for them.
    assert c.abort_now("t")[0] == TxnError.CONCURRENT_TRANSACTIONS
    c.markers_written(markers)
    assert c.abort_now("t")[0] == TxnError.INVALID_TXN_STATE  # nothing open
    # The producer that held it is fenced: its commit is refused.
    assert c.end("t", pid, epoch, commit=True)[0] == TxnError.PRODUCER_FENCED


def test_timeouts_are_bounded_and_epochs_wrap_to_a_new_producer_id() -> None:
    c = _coordinator()
    assert c.init_producer_id(0.0, "t", 0)[0] == TxnError.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id(0.0, "t", 60_001)[0] == TxnError.INVALID_TRANSACTION_TIMEOUT
    _, txn, _ = c.init_producer_id(0.0, "t", 1_000)
    assert txn is not None
    txn.producer_epoch = EPOCH_MAX
    _, again, _ = c.init_producer_id(1.0, "t", 1_000)
    assert again is not None
    assert (again.producer_id != 1000, again.producer_epoch) == (True, 0)


def test_a_coordinator_that_takes_over_finishes_a_decided_transaction() -> None:
    c = _coordinator()
    _, markers = c.end("t", *_open(c, "t", {5, 6}), commit=True)
    written = c.txns["t"].to_json()  # the decision, written before any marker
    other = _coordinator()
    other.restore(50.0, written)
    assert other.pending() == [markers]
    assert markers is not None
    other.markers_written(markers)
    assert other.txns["t"].state == State.COMPLETE_COMMIT
    # An open transaction read back gets a whole timeout from then.
    c2 = _coordinator()
    _open(c2, "u", {1})
    other.restore(100.0, c2.txns["u"].to_json())
    assert other.tick(109.9) == []
    assert len(other.tick(110.0)) == 1


@pytest.mark.parametrize("seed", range(30))
def test_producers_coming_and_going_never_see_a_transaction_decided_twice(seed: int) -> None:
    """Whatever the producers of three ids do, each transaction is decided
    once, its markers name exactly the logs it wrote, and a producer that
    was fenced stays fenced."""
    rng = random.Random(seed)
    c = _coordinator()
    now = 0.0
    # Each client: the (pid, epoch) it has, and its open transaction's logs.
    clients: dict[str, tuple[int, int] | None] = {"a": None, "b": None, "c": None}
    wrote: dict[str, set[int] | None] = dict.fromkeys(clients)
    fenced: set[tuple[str, int, int]] = set()
    out: list = []

    def decided(markers: Any) -> None:
        assert markers.logs == wrote[markers.transactional_id]
        wrote[markers.transactional_id] = None
        out.append(markers)

    for _ in range(200):
        now += rng.uniform(0.0, 2.0)
        tid = rng.choice(sorted(clients))
        me = clients[tid]
        roll = rng.random()
        if roll < 0.2 or me is None:
            code, txn, markers = c.init_producer_id(now, tid, 5_000)
            if markers is not None:
                decided(markers)
            if code == TxnError.NONE and txn is not None:
                if me is not None:
                    fenced.add((tid, *me))
                clients[tid] = (txn.producer_id, txn.producer_epoch)
        elif roll < 0.6:
            logs = {rng.randint(1, 9) for _ in range(rng.randint(1, 3))}
            code = c.add_logs(now, tid, *me, logs)
            if (tid, *me) in fenced:
                assert code == TxnError.PRODUCER_FENCED
            if code == TxnError.NONE:
                wrote[tid] = (wrote[tid] or set()) | logs
        elif roll < 0.8:
            code, markers = c.end(tid, *me, commit=rng.random() < 0.5)
            if markers is not None:
                decided(markers)
        elif out:
            c.markers_written(out.pop(rng.randrange(len(out))))
        for markers in c.tick(now):
            fenced.add((markers.transactional_id, markers.producer_id, markers.producer_epoch - 1))
            decided(markers)
        # At most one decision out per id, and it is what the id is deciding.
        by_id = [m.transactional_id for m in out]
        assert len(by_id) == len(set(by_id))
        for m in out:
            assert c.txns[m.transactional_id].state in (State.PREPARE_COMMIT, State.PREPARE_ABORT)


def test_a_commits_tag_stays_with_the_id_until_its_next_commit() -> None:
    """The tag a commit carries (a Spark micro-batch's) is the id's state's
    until the next commit, across a coordinator that reads it back; an abort
    leaves it as it was."""
    from logstrand.transactions._coordinator import Txn

    c = _coordinator()
    pid, epoch = _open(c, "t", {5})
    _, markers = c.end("t", pid, epoch, commit=True, tag="q batch 0")
    assert markers is not None
    c.markers_written(markers)
    assert c.txns["t"].tag == "q batch 0"
    assert c.add_logs(2.0, "t", pid, epoch, {5}) == TxnError.NONE
    _, markers = c.end("t", pid, epoch, commit=False, tag="ignored")
    assert markers is not None
    c.markers_written(markers)
    again = Txn.from_json(c.txns["t"].to_json())
    assert (again.tag, again.state) == ("q batch 0", State.COMPLETE_ABORT)


def test_an_idle_id_with_nothing_open_expires_and_one_in_use_does_not() -> None:
    """Rule 7: an id whose producer sent nothing for the expiry, with no
    transaction open, is forgotten; a request in between (``use``) or an
    open transaction keeps it.  One heap entry per id: ``expire`` looks at
    what is due, not at every id."""
    ids = itertools.count(1000)
    c = TxnCoordinator(lambda: next(ids), max_timeout_ms=60_000, expiry_ms=10_000)
    for tid in ("idle", "busy", "open"):
        c.init_producer_id(0.0, tid, 50_000)  # a new id counts as used
    assert c.add_logs(1.0, "open", *_producer(c, "open"), {5}) == TxnError.NONE
    c.use("open", 1.0)
    assert c.expire(5.0) == []
    c.use("busy", 8.0)
    assert c.next_deadline() is not None
    assert c.expire(10.5) == ["idle"]  # busy was used at 8, open is open
    assert "idle" not in c.txns
    assert c.expire(17.0) == []
    assert sorted(c.expire(18.5)) == ["busy"]
    assert "open" in c.txns  # open past its expiry: kept (rule 5 aborts it first)
    assert len(c._idle) == 1  # one entry left: open's
    # A forgotten id starts afresh: a new producer id.
    code, txn, _ = c.init_producer_id(20.0, "idle", 50_000)
    assert code == TxnError.NONE
    assert txn is not None
    assert txn.producer_id not in (1000, 1001, 1002)


def _producer(c: TxnCoordinator, tid: str) -> tuple[int, int]:
    txn = c.txns[tid]
    return txn.producer_id, txn.producer_epoch

"""Recovery as a procedure, driven by a scripted driver: how it retries, whom it
asks, where it stores its decisions, and when it stops."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest

from logstrand.batch import make_batch
from logstrand.epochstore import EpochMetadata, LogAttributes, NodeConfig, Placement
from logstrand.errors import LogstrandError, Status
from logstrand.idempotence import Producers, Sent, pack_entries
from logstrand.placement import CopysetSelector
from logstrand.sequencer import _decisions as decisions
from logstrand.sequencer import _procedures as procs
from logstrand.testing import MemoryEpochStore
from logstrand.wire import Digest, GetDigest, LogInfo, LogInfoReply

if TYPE_CHECKING:
    from collections.abc import Callable

LOG = 1
NODESET = (1, 2, 3)


class Driver:
    """Runs a procedure to its end against scripted nodes and a memory epoch store.

    ``up``: the nodes that really answer; the procedure's ``alive()`` is
    whatever the test says the view believes.  Sleeps advance a fake clock.
    """

    def __init__(self, up: set[int]) -> None:
        self.up = up
        self.now = 0.0
        self.sleeps: list[float] = []
        self.copysets: list[tuple[int, ...]] = []
        self.stores: list[Any] = []
        self.store = MemoryEpochStore()
        for n in NODESET:
            self.store.add_node(NodeConfig(n, f"127.0.0.1:{4000 + n}"))
        self.store.create_logs(LOG, LOG, LogAttributes(replication_factor=2))
        self.store.take_epoch(LOG, Placement(NODESET, 2))  # epoch 1, whose sequencer died
        self.store.take_epoch(LOG, Placement(NODESET, 2))  # epoch 2, the recovering one

    def answer(self, node: int, msg: Any) -> Any:
        if node not in self.up:
            return None
        if isinstance(msg, LogInfo):
            return LogInfoReply(msg.request_id, int(Status.OK))
        assert isinstance(msg, GetDigest)
        lsn = (1 << 32) | 1  # every node holds ESN 1 of epoch 1
        batch = make_batch([lsn], [b"acked"], timestamps_ms=5)
        return Digest(msg.request_id, int(Status.OK), node, True, (1,), batch)

    def run(self, proc: procs.Procedure, steps_max: int = 10_000) -> Any:
        value: Any = None
        error: LogstrandError | None = None
        for _ in range(steps_max):
            try:
                cmd = proc.throw(error) if error is not None else proc.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if isinstance(cmd, procs.Ask):
                value = {}
                for node, msg in cmd.requests:
                    reply = self.answer(node, msg)
                    if reply is not None:
                        value[node] = reply
            elif isinstance(cmd, procs.StoreCopies):
                self.copysets.append(cmd.message.copyset)
                self.stores.append(cmd.message)
                # A node that is down refuses the connection: no status at all.
                value = {n: int(Status.OK) for n in cmd.message.copyset if n in self.up}
            elif isinstance(cmd, procs.EpochStoreCall):
                try:
                    value = cmd.fn(self.store)
                except LogstrandError as exc:
                    error = exc
            elif isinstance(cmd, procs.Sleep):
                self.sleeps.append(cmd.seconds)
                self.now += cmd.seconds
            else:
                assert isinstance(cmd, procs.Tell)
        raise AssertionError("the procedure did not end")


def recover(
    d: Driver,
    alive: Callable[[], set[int]],
    errors: list[str],
    cancelled: Callable[[], bool] = lambda: False,
) -> procs.Procedure:
    meta = EpochMetadata(1, NODESET, 2)
    return procs.recover(
        LOG,
        2,
        [meta, EpochMetadata(2, NODESET, 2)],
        lambda m: CopysetSelector(m.nodeset, m.replication_factor, rng=random.Random(3)),
        alive,
        1000,
        cancelled=cancelled,
        on_error=errors.append,
    )


def test_a_recovery_that_cannot_store_retries_soon_with_a_fresh_view_of_who_is_alive() -> None:
    """Back-to-back failover: node 3 is dead but still a member; node 1 just
    came back but the view has not seen it yet.  The first attempts cannot
    store anywhere; once the view has node 1, the next attempt succeeds."""
    d = Driver(up={1, 2})
    errors: list[str] = []

    def alive() -> set[int]:
        return {2, 3} if d.now < 0.1 else {1, 2, 3}

    assert d.run(recover(d, alive, errors)) is not None
    assert d.store.last_clean_epoch(LOG) == 1
    assert len(errors) == 2
    assert "down or failing: [1, 3]" in errors[0]
    assert d.sleeps == [0.05, 0.1]  # well under a second at first
    # One STORE per failed attempt: node 3 failed and was not tried again,
    # and no copyset was left among the nodes believed alive.  The last
    # attempt tries node 3 at most once more.
    assert [set(c) for c in d.copysets[:2]] == [{2, 3}, {2, 3}]
    assert set(d.copysets[-1]) == {1, 2}
    assert len(d.copysets) <= 4


class ProducerDriver(Driver):
    """ESN 1 of epoch 1 is an unacknowledged idempotent batch (producer 9,
    record 0) that only node 1 holds, with its entry."""

    def answer(self, node: int, msg: Any) -> Any:
        if node not in self.up or not isinstance(msg, GetDigest):
            return super().answer(node, msg)
        if node != 1:
            return Digest(msg.request_id, int(Status.OK), node, True, (), None)
        lsn = (1 << 32) | 1
        batch = make_batch([lsn], [b"unacked"], timestamps_ms=5)
        entry = pack_entries(9, [Sent(0, 1, lsn, 5)])
        return Digest(msg.request_id, int(Status.OK), node, True, (1,), batch, entry)


def test_recovery_stores_carry_the_entries_of_the_batches_they_rewrite() -> None:
    """Recovery copies the batch to two nodes.  Its STORE carries the batch's
    producer entry, so the nodes that hold only recovery's copies know it: a
    later recovery (this one cut short, node 1 gone) keeps the batch's entry
    and a retry of the batch is answered, not stored again."""
    d = ProducerDriver(up={1, 2, 3})
    done = d.run(recover(d, lambda: {1, 2, 3}, []))
    assert done is not None
    assert [(s.seq, s.lsn) for s in done.sent(9)] == [(0, (1 << 32) | 1)]
    (store,) = d.stores
    assert store.recovery_seal == 2
    assert Producers.unpack_entries(store.producers) == [(9, Sent(0, 1, (1 << 32) | 1, 5))]


def test_the_pause_between_attempts_doubles_up_to_a_second() -> None:
    d = Driver(up={1})  # too few answer the digest: every attempt fails
    errors: list[str] = []
    done = d.run(recover(d, lambda: {1, 2, 3}, errors, cancelled=lambda: d.now > 6))
    assert done is None
    assert d.sleeps[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert max(d.sleeps) == procs.RETRY_MAX_S
    assert all("release pointers from [1] only" in e for e in errors)


def test_storing_decisions_fails_at_once_when_no_copyset_is_left() -> None:
    d = Driver(up={1, 2, 3})
    batch = make_batch([(1 << 32) | 1], [b"x"], timestamps_ms=5)
    sel = CopysetSelector(NODESET, 2, rng=random.Random(0))
    proc = decisions._store_chunk(LOG, 2, sel, batch, lambda: {1}, 1.0)
    with pytest.raises(LogstrandError, match=r"down or failing: \[2, 3\]") as caught:
        d.run(proc)
    assert caught.value.status == Status.NOSEQUENCER
    assert d.copysets == []  # nothing sent: no copyset among the live nodes


def test_recovery_stamps_never_go_back_nor_above_the_new_sequencer() -> None:
    # Records stamped 100, 120 and 300 (never acknowledged: above the cap), a
    # hole between, a bridge at the end; the new sequencer starts at 200.
    assert decisions.recovery_stamps([100, 0, 120, 300, 0], 200) == [100, 120, 120, 200, 200]
    # Copies from before stamps were monotonic: clamped down, never up.
    assert decisions.recovery_stamps([150, 110, 0], 200) == [110, 110, 200]
    assert decisions.recovery_stamps([], 5) == []

"""A stopping sequencer ends its own epoch (``sequencer._handoff``), driven by
the scripted driver of ``test_procedures``: what it writes, when it writes
nothing, and that the next sequencer's recovery then has nothing to do."""

from __future__ import annotations

import random

import pytest

from logstrand.batch import make_batch
from logstrand.epochstore import EpochEnd, EpochMetadata, LogAttributes, NodeConfig, Placement
from logstrand.errors import PreemptedError, Status
from logstrand.placement import CopysetSelector
from logstrand.records import BRIDGE
from logstrand.sequencer import SendStore, SequencerCore
from logstrand.sequencer import _procedures as procs
from logstrand.sequencer._handoff import end_epoch, endable
from logstrand.storage._admission import check
from logstrand.testing import MemoryEpochStore
from logstrand.types import compose_lsn
from logstrand.wire import Release, Store

from .test_procedures import LOG, NODESET, Driver


def _selector() -> CopysetSelector:
    return CopysetSelector(NODESET, 2, rng=random.Random(5))


def _fresh_driver(up: set[int]) -> Driver:
    """A driver whose log has epoch 1 only (its sequencer is the one stopping)."""
    d = Driver(up)
    d.store = MemoryEpochStore()
    for n in NODESET:
        d.store.add_node(NodeConfig(n, f"127.0.0.1:{4000 + n}"))
    d.store.create_logs(LOG, LOG, LogAttributes(replication_factor=2))
    d.store.take_epoch(LOG, Placement(NODESET, 2))
    return d


def _core_with_acked(records: int) -> SequencerCore:
    """Epoch 1's sequencer with ``records`` one-record appends, each stored on R nodes."""
    core = SequencerCore(LOG, 1, _selector(), last_timestamp_ms=1000)
    for i in range(records):
        actions = core.append(make_batch([0], [b"r%d" % i], timestamps_ms=0), i, 0.0, 1000 + i)
        for a in actions:
            if isinstance(a, SendStore):
                core.on_stored(a.message.store_id, a.node_id, int(Status.OK), 0.0)
    return core


def test_a_stopping_sequencer_ends_its_epoch_as_recovery_would() -> None:
    d = _fresh_driver(up=set(NODESET))
    core = _core_with_acked(3)
    assert endable(core)
    assert d.run(end_epoch(core, lambda: set(NODESET), 1.0))
    # One STORE: the bridge right after the last record, with the epoch's own seal.
    [store] = d.stores
    assert store.recovery_seal == 1
    assert len(store.copyset) == 2
    assert store.batch.lsns() == [compose_lsn(1, 4)]
    assert store.batch.flag_bits & BRIDGE
    assert d.store.epoch_end(LOG, 1) == EpochEnd(3, 4, 1)
    assert d.store.last_clean_epoch(LOG) == 1
    # The next epoch's Kafka offsets start after the three records.
    assert d.store.offset_bases(LOG)[-1] == (2, 3)
    # The next sequencer's recovery has nothing left to do: no question, no STORE.
    d.store.take_epoch(LOG, Placement(NODESET, 2))
    d.stores.clear()
    history = [EpochMetadata(1, NODESET, 2), EpochMetadata(2, NODESET, 2)]
    recovery = procs.recover(LOG, 2, history, lambda m: _selector(), lambda: set(NODESET), 9000)
    asked: list[object] = []
    d.answer = lambda node, msg: asked.append(msg)  # type: ignore[method-assign]
    assert d.run(recovery) is not None
    assert asked == []
    assert d.stores == []


def test_an_epoch_a_newer_sequencer_took_is_left_to_that_one_s_recovery() -> None:
    d = _fresh_driver(up=set(NODESET))
    core = _core_with_acked(2)
    d.store.take_epoch(LOG, Placement(NODESET, 2))  # a client went elsewhere meanwhile
    assert d.run(end_epoch(core, lambda: set(NODESET), 1.0)) is False
    assert d.stores == []
    assert d.store.epoch_end(LOG, 1) is None
    assert d.store.last_clean_epoch(LOG) == 0


def test_a_node_a_newer_sequencer_sealed_stops_the_end_before_any_release() -> None:
    """The end is recorded first, the bridge refused: the nodes are never told
    to release past the epoch, and it stays unclean for the newer sequencer's
    recovery (which decides the same end, with its higher seal)."""
    d = _fresh_driver(up=set(NODESET))
    core = _core_with_acked(2)
    proc = end_epoch(core, lambda: set(NODESET), 1.0)
    record = next(proc)  # no newer epoch yet: the end goes in
    assert isinstance(record, procs.EpochStoreCall)
    cmd = proc.send(record.fn(d.store))
    assert isinstance(cmd, procs.StoreCopies)
    with pytest.raises(PreemptedError):  # as a node sealed since answers
        proc.send({n: int(Status.PREEMPTED) for n in cmd.message.copyset})
    assert d.store.epoch_end(LOG, 1) == EpochEnd(2, 3, 1)
    assert d.store.last_clean_epoch(LOG) == 0


def test_only_an_idle_recovered_released_sequencer_is_endable() -> None:
    core = _core_with_acked(1)
    assert endable(core)
    # A wave in flight: not yet.
    stores = core.append(make_batch([0], [b"late"], timestamps_ms=0), "t", 0.0, 2000)
    assert not endable(core)
    for a in stores:
        if isinstance(a, SendStore):
            core.on_stored(a.message.store_id, a.node_id, int(Status.OK), 0.0)
    assert endable(core)
    # Its earlier epochs not recovered yet: the next sequencer recovers them.
    assert not endable(SequencerCore(LOG, 2, _selector(), recovered=False))
    preempted = _core_with_acked(1)
    preempted.preempt()
    assert not endable(preempted)


class Facts:
    """What admission knows of log 1: epochs up to 1 handed out."""

    def __init__(self, lce: int) -> None:
        self.lce = lce

    def log_known(self, log_id: int) -> bool:
        return log_id == LOG

    def node_known(self, node_id: int) -> bool:
        return node_id in NODESET

    def next_epoch(self, log_id: int) -> int:
        return 2

    def last_clean_epoch(self, log_id: int) -> int:
        return self.lce

    def trim_point(self, log_id: int) -> int:
        return 0

    def compacted(self, log_id: int) -> bool:
        return False


def _store(lsn: int, flags: int, seal: int) -> Store:
    batch = make_batch([lsn], [None], timestamps_ms=0, flags=[flags])
    return Store.of(1 << 63, LOG, seal, (1, 2), 0, True, batch, seal)


def test_nodes_take_a_recovery_store_in_its_own_epoch_only_as_that_epoch_s_one_bridge() -> None:
    bridge = _store(compose_lsn(1, 4), BRIDGE, seal=1)
    assert check(bridge, Facts(lce=0)) is None
    refused = check(bridge, Facts(lce=1))  # the epoch is clean: too late
    assert refused is not None
    assert refused.status == Status.PREEMPTED
    plain = _store(compose_lsn(1, 4), 0, seal=1)  # a record, not a bridge
    assert check(plain, Facts(lce=0)) is not None


def test_a_release_up_to_esn_0_of_the_next_epoch_is_taken_and_no_further() -> None:
    assert check(Release(LOG, compose_lsn(2, 0)), Facts(lce=1)) is None
    refused = check(Release(LOG, compose_lsn(2, 1)), Facts(lce=1))
    assert refused is not None
    assert refused.status == Status.INVALID_PARAM


def _activate(d: Driver, clock_ms: int) -> tuple[object, list[object]]:
    """The next sequencer's activation; what it asked the nodes (SEALs
    answered as sealed nodes answer, stamped 5,000)."""
    from logstrand.wire import Seal, SealReply

    asked: list[object] = []

    def answer(node: int, msg: object) -> object:
        asked.append(msg)
        assert isinstance(msg, Seal)
        return SealReply(msg.request_id, int(Status.OK), node, msg.seal_epoch, 5000)

    d.answer = answer  # type: ignore[method-assign]
    return d.run(procs.activate(LOG, Placement(NODESET, 2), 1.0, lambda: clock_ms)), asked


def test_after_a_hand_off_the_next_sequencer_starts_without_a_seal() -> None:
    """Every earlier epoch clean, the last ended by its own sequencer: no
    SEAL (no older wave can be acknowledged any more), and the new epoch
    stamps from the end's newest timestamp when the clock is behind it."""
    d = _fresh_driver(up=set(NODESET))
    core = _core_with_acked(3)  # stamped 1,000..1,002
    assert d.run(end_epoch(core, lambda: set(NODESET), 1.0))
    assert d.store.epoch_end(LOG, 1).last_timestamp_ms == 1002
    (epoch, _, _, start, sealed), asked = _activate(d, clock_ms=10)
    assert (epoch, start, sealed, asked) == (2, 1002, None, [])
    assert d.store.epoch_starts(LOG)[2] == 1002


def test_after_a_crash_the_next_sequencer_seals() -> None:
    """Epoch 1 not clean (its sequencer died): the activation seals it on
    an f-majority and stamps from the newest timestamp the nodes report."""
    d = _fresh_driver(up=set(NODESET))
    (epoch, _, _, start, sealed), asked = _activate(d, clock_ms=10)
    assert (epoch, start) == (2, 5000)
    assert sealed is not None
    assert len(asked) == len(NODESET)

"""The node's rules for STOREs after a seal, and its digest, on an in-memory LogsDB."""

from __future__ import annotations

from logstrand.batch import make_batch
from logstrand.logsdb import PutBatch
from logstrand.storage._rules import admit_store, digest, log_info
from logstrand.testing import memory_logsdb
from logstrand.wire import GetDigest, LogInfo, Store


def store(epoch: int, esn: int, *, recovery_seal: int = 0, log: int = 1) -> Store:
    lsn = (epoch << 32) | esn
    batch = make_batch([lsn], [b"x"], timestamps_ms=1000)
    return Store.of(1, log, 1, (1, 2), 0, False, batch, recovery_seal)


def test_seal_refuses_old_epochs_but_not_newer_ones() -> None:
    db = memory_logsdb()
    assert admit_store(db, store(3, 1))
    db.seal(1, 3)
    assert not admit_store(db, store(3, 2))
    assert not admit_store(db, store(2, 9))
    assert admit_store(db, store(4, 1))
    assert admit_store(db, store(3, 2, log=2))  # seals are per log


def test_recovery_stores_need_a_newer_seal_and_raise_the_seal() -> None:
    db = memory_logsdb()
    db.seal(1, 4)  # the sequencer of epoch 5 sealed epochs up to 4
    assert admit_store(db, store(3, 7, recovery_seal=5))  # its own recovery
    assert not admit_store(db, store(3, 7, recovery_seal=4))  # an older one: too late
    # The recovery of epoch 9 writes here first: from then on epoch 5's
    # recovery (and every sequencer up to epoch 8) is refused.
    assert admit_store(db, store(3, 7, recovery_seal=9))
    assert db.seal_epoch(1) == 8
    assert not admit_store(db, store(3, 7, recovery_seal=5))
    assert not admit_store(db, store(8, 1))


def test_digest_and_log_info_report_copies_with_their_waves() -> None:
    db = memory_logsdb()
    recs = [(2 << 32) | i for i in (1, 2, 5)] + [(3 << 32) | 1]
    for wave, lsn in enumerate(recs, start=1):
        batch = make_batch([lsn], [b"p%d" % wave], timestamps_ms=1000 + wave)
        db.write([PutBatch.of(1, batch, (1, 2), wave)])
    d = digest(db, 7, GetDigest(4, 1, 2, 2))
    assert d.complete
    assert d.node_id == 7
    assert d.request_id == 4
    assert d.batch is not None
    assert d.batch.lsns() == [(2 << 32) | 2, (2 << 32) | 5]
    assert d.waves == (2, 3)
    info = log_info(db, (2 << 32) | 5, LogInfo(5, 1))
    assert (info.release_lsn, info.last_lsn, info.records) == ((2 << 32) | 5, (3 << 32) | 1, 4)


def test_only_a_recovery_store_carries_producer_entries() -> None:
    import pytest

    from logstrand.idempotence import Sent, pack_entries

    entry = pack_entries(9, [Sent(0, 1, (3 << 32) | 7, 1000)])
    batch = make_batch([(3 << 32) | 7], [b"x"], timestamps_ms=1000)
    assert Store.of(1, 1, 5, (1, 2), 0, False, batch, 5, entry).producers == entry
    with pytest.raises(ValueError, match="only a recovery"):
        Store.of(1, 1, 1, (1, 2), 0, False, batch, 0, entry)
    with pytest.raises(ValueError, match="whole producer entries"):
        Store.of(1, 1, 5, (1, 2), 0, False, batch, 5, entry[:-1])

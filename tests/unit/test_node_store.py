"""The storage node's request rules (``NodeStore``), over a LogsDB in memory."""

from __future__ import annotations

from logstrand import wire
from logstrand.batch import PackedBatch
from logstrand.errors import Status
from logstrand.records import WRITTEN_BY_RECOVERY
from logstrand.storage._health_core import NodeClock
from logstrand.storage._metrics import NodeMetrics
from logstrand.storage._node_store import NodeStore
from logstrand.testing import memory_logsdb
from logstrand.types import compose_lsn

LOG = 1


def _store() -> NodeStore:
    clock = NodeClock(lambda: 1_700_000_000_000, 5_000)
    store = NodeStore(7, NodeMetrics(7), lambda *_: None, lambda *_: None, clock)
    store.attach(memory_logsdb())
    return store


def _msg(store_id: int, wave: int, copyset: tuple[int, ...], flags: int = 0) -> wire.Store:
    batch = PackedBatch.for_append([None] * 3, [b"a", b"b", b"c"]).restamp(
        first_lsn=compose_lsn(2, 10), timestamp_ms=1_700_000_000_000, wave=wave, copyset=copyset
    )
    if flags:
        batch = batch.reheader(copyset=copyset, add_flags=flags)
    return wire.Store(store_id, LOG, wave, copyset, 0, False, batch, 0, False)


def _held(store: NodeStore) -> list[tuple[int, tuple[int, ...]]]:
    got = store.read_packed(LOG, compose_lsn(2, 1), compose_lsn(2, 100))
    return [(b.wave, b.copyset) for b in got.batches]


def test_a_late_store_of_an_earlier_wave_does_not_replace_the_later_copy() -> None:
    """Wave 2 went to (7, 3) after wave 1 to (7, 2) timed out; wave 1 arrives
    last.  Written, it would say the copies are on 7 and 2, and a rebuilding of
    node 3 would not re-create them."""
    store = _store()
    assert [r.status for r in store.commit([_msg(2, 2, (7, 3))])] == [Status.OK]
    assert [r.status for r in store.commit([_msg(1, 1, (7, 2))])] == [Status.OK]
    assert _held(store) == [(2, (7, 3))]
    # The same within one group commit.
    fresh = _store()
    fresh.commit([_msg(2, 2, (7, 3)), _msg(1, 1, (7, 2))])
    assert _held(fresh) == [(2, (7, 3))]


def test_a_recovery_copy_wins_over_any_wave_of_the_sequencer() -> None:
    store = _store()
    store.commit([_msg(1, 1, (7, 3), flags=WRITTEN_BY_RECOVERY)])
    store.commit([_msg(2, 5, (7, 2))])
    assert _held(store) == [(1, (7, 3))]
    # And a better copy still replaces a worse one.
    store.commit([_msg(3, 2, (7, 4), flags=WRITTEN_BY_RECOVERY)])
    assert _held(store) == [(2, (7, 4))]


def test_the_clean_bytes_a_pass_reports_are_what_is_left_below_its_end() -> None:
    """After a pass, a partition's directory entry keeps its LSN range and
    holds few records below the pass's end.  Counted in proportion to the
    range, ten records kept below ESN 960 and forty dirty above it made the
    log look 96% clean, under its dirty ratio: the cleaner never came back
    for the forty (a full make test's flake, reproduced with the cleaner's
    candidates printed)."""
    from .logsdb_helpers import put

    store = _store()
    ts = 1_700_000_000_000
    lsns = [compose_lsn(1, n) for n in range(1, 1001)]
    # 100 rounds of 10 keys, a batch per round, in one partition.
    store.db.write(
        [
            put(LOG, lsns[r * 10 : r * 10 + 10], ts=ts, keys=[b"k%d" % k for k in range(10)])
            for r in range(100)
        ]
    )
    whole = store.stored_bytes_to(LOG, lsns[-1])
    end = lsns[959]
    # What a pass to ESN 960 leaves below its end: round 96's batch.
    store.remove(LOG, lsns[:950])
    kept = store.stored_bytes_to(LOG, end)
    left = store.stored_bytes_to(LOG, lsns[-1])
    assert left < whole / 10  # fifty records of a thousand
    # Round 96's batch: a fifth of what is left, not 96% of it.
    assert 0.1 * left < kept < 0.3 * left, (kept, left)

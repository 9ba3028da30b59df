"""The epoch store contract, against SQLite and a real ZooKeeper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import TYPE_CHECKING

import pytest
import trio

from logstrand.epochstore import (
    AsyncEpochStore,
    EpochEnd,
    EpochStore,
    LogAttributes,
    LogRange,
    Members,
    NodeConfig,
    Placement,
    SqliteEpochStore,
    open_epoch_store,
)
from logstrand.epochstore._log_docs import TRIM_FEED_MAX
from logstrand.errors import (
    EpochStoreUnavailableError,
    ExistsError,
    InvalidArgumentError,
    NotFoundError,
    StaleError,
    Status,
)
from logstrand.records import parse_log_range
from logstrand.testing import MemoryEpochStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

P3 = Placement((1, 2, 3), 2)


@pytest.fixture
def store(store_url: str) -> Iterator[EpochStore]:
    s = open_epoch_store(store_url)
    yield s
    s.close()


def add_nodes(store: EpochStore, n: int, racks: int = 0) -> None:
    for i in range(1, n + 1):
        loc = f"r1.dc1.rack{i % racks}" if racks else ""
        store.add_node(NodeConfig(i, f"127.0.0.1:{4000 + i}", location=loc))


def test_epochs_are_handed_out_in_order_with_placement_history(store: EpochStore) -> None:
    with pytest.raises(InvalidArgumentError, match="placement"):
        store.take_epoch(1)
    assert store.take_epoch(1, P3) == (1, store.log_epochs(1).history[0])
    assert store.take_epoch(1)[0] == 2
    assert store.take_epoch(1, P3)[0] == 3  # same placement: no new history entry
    epoch, meta = store.take_epoch(1, Placement((2, 3, 4, 5), 3))
    assert (epoch, meta.since, meta.nodeset) == (4, 4, (2, 3, 4, 5))
    state = store.log_epochs(1)
    assert state.next_epoch == 5
    assert [h.since for h in state.history] == [1, 4]
    old = state.metadata_for(3)
    assert old is not None
    assert old.nodeset == (1, 2, 3)
    assert state.metadata_for(0) is None
    # Logs are independent.
    assert store.take_epoch(2, P3)[0] == 1


def test_take_epoch_with_expectation_is_a_compare_and_set(store: EpochStore) -> None:
    store.take_epoch(9, P3)
    with pytest.raises(StaleError) as info:
        store.take_epoch(9, expect_next=1)
    assert info.value.status is Status.STALE
    assert store.take_epoch(9, expect_next=2)[0] == 2


def test_last_clean_epoch_only_moves_forward(store: EpochStore) -> None:
    assert store.last_clean_epoch(3) == 0
    for _ in range(5):
        store.take_epoch(3, P3)
    assert store.set_last_clean_epoch(3, 2) == 2
    assert store.set_last_clean_epoch(3, 2) == 2  # the same again is fine
    with pytest.raises(StaleError, match="cannot go to 1"):
        store.set_last_clean_epoch(3, 1)
    with pytest.raises(InvalidArgumentError, match="never handed out"):
        store.set_last_clean_epoch(3, 6)
    assert store.set_last_clean_epoch(3, 5) == 5
    assert store.last_clean_epoch(3) == 5


def test_trim_points_only_move_up(store: EpochStore) -> None:
    assert store.trim_point(1) == 0
    assert store.set_trim_point(1, 500) == 500
    assert store.set_trim_point(1, 200) == 500
    assert store.trim_point(1) == 500
    assert store.trim_point(2) == 0
    # Many at once (one query on SQLite, in chunks past its parameter bound).
    for log in range(10, 1210, 3):
        store.set_trim_point(log, log * 7)
    got = store.trim_points(range(1, 1210))
    assert got == {
        log: 500 if log == 1 else log * 7 if log >= 10 and (log - 10) % 3 == 0 else 0
        for log in range(1, 1210)
    }


def test_the_trim_feed_names_the_logs_trimmed_since_a_point(store: EpochStore) -> None:
    """A node's maintenance reads the trim points the feed names, not every log's."""
    assert store.trims_changed(-1) == (0, None)  # never read: read them all
    assert store.trims_changed(0) == (0, [])
    store.set_trim_point(7, 100)
    store.set_trim_point(3, 50)
    store.set_trim_point(7, 10)  # no move, but in the feed (a retried call)
    assert store.trims_changed(0) == (3, [3, 7])
    assert store.trims_changed(1) == (3, [3, 7])
    assert store.trims_changed(2) == (3, [7])
    assert store.trims_changed(3) == (3, [])
    assert store.trims_changed(4) == (3, None)  # ahead of the feed: a store reset
    # A node further behind than the feed remembers reads every point again.
    for i in range(TRIM_FEED_MAX):
        store.set_trim_point(100 + i % 5, i)
    seq, _ = store.trims_changed(3)
    assert seq == 3 + TRIM_FEED_MAX
    assert store.trims_changed(2) == (seq, None)
    assert store.trims_changed(3) == (seq, [100, 101, 102, 103, 104])
    last_two = sorted({100 + (TRIM_FEED_MAX - 2) % 5, 100 + (TRIM_FEED_MAX - 1) % 5})
    assert store.trims_changed(seq - 2) == (seq, last_two)


def test_compaction_state_counts_passes_and_its_clean_point_only_moves_up(
    store: EpochStore,
) -> None:
    assert store.compaction(1) is None
    store.record_compaction(1, 500, 4000, {"records_removed": 7})
    late = store.record_compaction(1, 300, 9999, {"records_removed": 1})
    assert late["clean_point"] == 500
    assert late["clean_bytes"] == 4000
    assert late["passes"] == 2
    assert late["last_pass"] == {"records_removed": 1}
    assert store.compaction(1) == late
    assert store.compaction(2) is None


def test_epoch_ends_are_kept_and_the_highest_seal_wins(store: EpochStore) -> None:
    assert store.epoch_end(1, 3) is None
    first = EpochEnd(lng_esn=10, bridge_esn=14, seal=5)
    assert store.record_epoch_end(1, 3, first) == first
    # An older recovery that finishes late does not overwrite a newer one...
    assert store.record_epoch_end(1, 3, EpochEnd(10, 12, 4)) == first
    # ...and a newer one does.
    later = EpochEnd(lng_esn=10, bridge_esn=13, seal=7)
    assert store.record_epoch_end(1, 3, later) == later
    assert store.epoch_end(1, 3) == later
    assert store.epoch_end(1, 4) is None
    assert store.epoch_end(2, 3) is None
    with pytest.raises(InvalidArgumentError):
        store.record_epoch_end(1, 8, EpochEnd(0, 1, 7))  # a recovery runs in a later epoch
    # The seal of the epoch itself: its sequencer ended it as it stopped.
    own = EpochEnd(lng_esn=2, bridge_esn=3, seal=7)
    assert store.record_epoch_end(1, 7, own) == own


def test_kafka_offset_bases_are_kept_by_epoch_and_the_first_stands(store: EpochStore) -> None:
    assert store.offset_bases(1) == []
    assert store.set_offset_base(1, 4, 250) == 250
    assert store.set_offset_base(1, 2, 100) == 100
    # A later recovery of the same epoch does not move a base once recorded.
    assert store.set_offset_base(1, 4, 260) == 250
    assert store.offset_bases(1) == [(2, 100), (4, 250)]
    assert store.offset_bases(2) == []
    with pytest.raises(InvalidArgumentError):
        store.set_offset_base(1, 1, 5)  # epoch 1 starts at 0, always


def test_nodes_configuration_round_trip(store: EpochStore) -> None:
    n1 = NodeConfig(
        1, "127.0.0.1:4441", "eu.dc1.r1", 2.0, ("storage",), 9101, "/data/1", kafka="h1:9092"
    )
    store.add_node(n1)
    store.add_node(NodeConfig(2, "127.0.0.1:4442"))
    assert store.node(1) == n1
    assert sorted(store.nodes()) == [1, 2]
    with pytest.raises(ExistsError):
        store.add_node(NodeConfig(1, "127.0.0.1:4443"))
    with pytest.raises(ExistsError, match="address"):
        store.add_node(NodeConfig(3, "127.0.0.1:4441"))
    store.update_node(NodeConfig(2, "127.0.0.1:4449", weight=0.5))
    assert store.node(2).weight == 0.5
    store.remove_node(2)
    with pytest.raises(NotFoundError):
        store.node(2)
    with pytest.raises(NotFoundError):
        store.remove_node(2)


def test_logs_configuration_round_trip(store: EpochStore) -> None:
    add_nodes(store, 3)
    attrs = LogAttributes(
        replication_factor=2,
        nodeset_size=3,
        retention_ms=7 * 86_400_000,
        cleanup_policy="compact",
        delete_retention_ms=3_600_000,
        min_compaction_lag_ms=1000,
        durability="fsync",
    )
    store.create_logs(1, 100, attrs)
    store.create_logs(200, 200, LogAttributes(replication_factor=1))
    assert store.log_attributes(50) == attrs
    assert store.log_attributes(200).replication_factor == 1
    assert [(r.first, r.last) for r in store.log_ranges()] == [(1, 100), (200, 200)]
    with pytest.raises(ExistsError, match="overlap"):
        store.create_logs(100, 150, LogAttributes())
    with pytest.raises(NotFoundError):
        store.log_attributes(150)
    updated = store.update_logs(1, 100, retention_ms=86_400_000, min_cleanable_ratio=0.2)
    assert updated.attributes.retention_ms == 86_400_000
    assert store.log_attributes(1).min_cleanable_ratio == 0.2
    assert store.log_attributes(1).cleanup_policy == "compact"  # the rest is kept
    with pytest.raises(InvalidArgumentError, match="unknown log attribute"):
        store.update_logs(1, 100, colour="blue")
    with pytest.raises(NotFoundError):
        store.update_logs(1, 99, retention_ms=1)
    store.remove_logs(200, 200)
    with pytest.raises(NotFoundError):
        store.remove_logs(200, 200)
    assert [(r.first, r.last) for r in store.log_ranges()] == [(1, 100)]


def test_log_ranges_have_names_as_topics_do(store: EpochStore) -> None:
    """``logs create 100..115 --name orders``: a range's name, unique, kept
    through attribute updates, changed or taken away on its own."""
    add_nodes(store, 3)
    orders = store.create_logs(100, 115, LogAttributes(replication_factor=2), name="orders")
    store.create_logs(200, 200, LogAttributes(replication_factor=2))
    assert (orders.name, store.log_range_named("orders")) == ("orders", orders)
    assert store.log_range(107).name == "orders"
    with pytest.raises(ExistsError, match="already named 'orders'"):
        store.create_logs(300, 301, LogAttributes(), name="orders")
    with pytest.raises(NotFoundError, match="no log range is named 'payments'"):
        store.log_range_named("payments")
    for bad in ("", "100", ".", "..", "a b", "x" * 250, "é"):
        with pytest.raises(InvalidArgumentError, match="bad log range name"):
            store.create_logs(400, 400, LogAttributes(), name=bad)
    store.update_logs(100, 115, retention_ms=60_000)
    assert store.log_range_named("orders").attributes.retention_ms == 60_000
    with pytest.raises(ExistsError):
        store.name_logs(200, 200, "orders")
    assert store.name_logs(200, 200, "audit.v1-x_2").name == "audit.v1-x_2"
    assert store.name_logs(100, 115, None).name is None
    with pytest.raises(NotFoundError):
        store.log_range_named("orders")
    assert [r.name for r in store.log_ranges()] == [None, "audit.v1-x_2"]
    # Ranges written before names existed read back unnamed.
    assert LogRange.from_json({"first": 1, "last": 2, "attributes": {}}).name is None


def test_replication_must_fit_the_cluster(store: EpochStore) -> None:
    with pytest.raises(InvalidArgumentError, match="larger than the cluster"):
        store.create_logs(1, 1, LogAttributes(replication_factor=1))  # no nodes yet
    add_nodes(store, 3, racks=2)
    store.create_logs(1, 1, LogAttributes(replication_factor=3))
    with pytest.raises(InvalidArgumentError, match="larger than the cluster"):
        store.create_logs(2, 2, LogAttributes(replication_factor=4))
    with pytest.raises(InvalidArgumentError, match="2 racks"):
        store.create_logs(3, 3, LogAttributes(replication_factor=3, replicate_across="rack"))
    store.create_logs(3, 3, LogAttributes(replication_factor=2, replicate_across="rack"))


def test_two_handles_see_each_other(store_url: str) -> None:
    a, b = open_epoch_store(store_url), open_epoch_store(store_url)
    try:
        assert a.cluster == b.cluster
        a.take_epoch(5, P3)
        assert b.take_epoch(5)[0] == 2
        assert a.log_epochs(5).next_epoch == 3
    finally:
        a.close()
        b.close()


def test_membership_register_watch_and_close(store: EpochStore) -> None:
    seen: list[frozenset[int]] = []
    said: list[Members] = []
    changed = threading.Event()

    def on_change(members: Members) -> None:
        seen.append(frozenset(members))
        said.append(members)
        changed.set()

    watch = store.watch_members(on_change)
    try:
        assert _wait(lambda: seen and seen[-1] == frozenset())
        s1 = store.register_member(1)
        s2 = store.register_member(2, sequencer=False, why="starting")
        assert store.alive_nodes() == {1, 2}
        assert _wait(lambda: seen[-1] == {1, 2})
        assert _wait(lambda: not said[-1][2].sequencer and said[-1][2].why == "starting")
        # What a member says of itself reaches the watch.
        s2.publish(sequencer=True)
        assert _wait(lambda: said[-1][2].sequencer and said[-1][1].sequencer)
        s1.publish(sequencer=False, why="hold-down")
        assert _wait(lambda: said[-1][1].why == "hold-down")
        assert not store.members()[1].sequencer
        s1.close()
        assert store.alive_nodes() == {2}
        assert _wait(lambda: seen[-1] == {2})
        s2.close()
        assert store.alive_nodes() == frozenset()
    finally:
        watch.cancel()


def test_a_node_id_has_one_live_session(store_url: str) -> None:
    a, b = open_epoch_store(store_url), open_epoch_store(store_url)
    try:
        session = a.register_member(4)
        with pytest.raises(ExistsError):
            b.register_member(4, wait_s=0.3)
        session.close()
        b.register_member(4, wait_s=5).close()
    finally:
        a.close()
        b.close()


def _wait(cond: object, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


HOLDER = textwrap.dedent(
    """
    import sys, time
    from logstrand.epochstore import open_epoch_store
    url = sys.argv[1]
    opts = {"lease_s": 1.0} if url.startswith("sqlite") else {"session_timeout_s": 2.0}
    store = open_epoch_store(url, **opts)
    store.register_member(7)
    print("registered", flush=True)
    time.sleep(600)
    """
)


def test_membership_ends_with_the_process(store_url: str, store: EpochStore) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, store_url], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"registered\n"
        assert 7 in store.alive_nodes()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        t0 = time.monotonic()
        # Gone after the lease (SQLite, 1 s) or the session timeout (ZooKeeper, <= 4 s).
        assert _wait(lambda: 7 not in store.alive_nodes(), timeout_s=20)
        assert time.monotonic() - t0 < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


SKEWED = textwrap.dedent(
    """
    import sys, time
    from logstrand.testing._skew import skew
    skew(int(sys.argv[2]))
    from logstrand.epochstore import open_epoch_store
    store = open_epoch_store(sys.argv[1], create=True)
    store.register_member(7)
    print("registered", flush=True)
    time.sleep(600)
    """
)


def test_members_clocks_are_compared_and_a_wrong_one_is_still_a_member(
    store_url: str, store: EpochStore
) -> None:
    """A member whose wall clock is 10 days slow stays a member (leases do
    not compare wall clocks), and its clock is measured as 10 days behind
    the cluster's (the median of three: two members here, on this clock)."""
    ten_days = 10 * 86_400_000
    sessions = [store.register_member(1), store.register_member(2)]
    proc = subprocess.Popen(
        [sys.executable, "-c", SKEWED, store_url, str(-ten_days)], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"registered\n"
        time.sleep(2.5)  # a lease of 1.5 s would have run out, and a clock probe come
        members = store.members()
        assert set(members) == {1, 2, 7}
        offsets = {n: m.clock_offset_ms for n, m in members.items()}
        assert offsets[7] is not None
        assert abs(offsets[7] + ten_days) < 1000, offsets
        assert all(o is not None and abs(o) < 1000 for n, o in offsets.items() if n != 7), offsets
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        for session in sessions:
            session.close()


RACER = textwrap.dedent(
    """
    import sys, time
    from logstrand.epochstore import open_epoch_store, Placement
    store = open_epoch_store(sys.argv[1], create=True)
    time.sleep(max(0.0, float(sys.argv[3]) - time.time()))  # all start together
    got = [store.take_epoch(42, Placement((1, 2, 3), 2))[0] for _ in range(int(sys.argv[2]))]
    print(" ".join(map(str, got)))
    store.close()
    """
)


@pytest.mark.parametrize(("procs", "each"), [(4, 250)])
def test_racing_processes_never_share_an_epoch(store_url: str, procs: int, each: int) -> None:
    start_at = str(time.time() + 3.0)
    running = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, store_url, str(each), start_at],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    results = []
    for p in running:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        results.append([int(x) for x in out.split()])
    every = [e for r in results for e in r]
    assert len(every) == procs * each
    assert sorted(every) == list(range(1, procs * each + 1))  # each won exactly once
    for r in results:
        assert r == sorted(r)
        assert len(set(r)) == len(r)
    # They really raced: some process saw others' epochs between its own.
    assert any(r[-1] - r[0] + 1 > len(r) for r in results)
    with open_epoch_store(store_url) as s:
        assert s.log_epochs(42).next_epoch == procs * each + 1


def test_zookeeper_outage_is_reported_and_recovered(tmp_path: Path) -> None:
    from logstrand.testing import ZooKeeperServer, zookeeper_available

    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed")
    with ZooKeeperServer(tmp_path / "zk") as zk:
        store = open_epoch_store(f"zk://{zk.address}/outage", call_timeout_s=1.0)
        try:
            store.take_epoch(1, P3)
            zk.stop()
            t0 = time.monotonic()
            with pytest.raises(EpochStoreUnavailableError) as info:
                store.take_epoch(1)
            assert info.value.status is Status.UNAVAILABLE
            assert "unavailable" in str(info.value)
            assert time.monotonic() - t0 < 5
            with pytest.raises(EpochStoreUnavailableError):
                store.log_epochs(1)
            zk.start()
            # No reconnect call: the client comes back by itself.
            assert _wait(lambda: _works(store), timeout_s=30)
            epoch, _ = store.take_epoch(1)
            assert epoch >= 2  # a write that timed out may have taken epoch 2
            assert store.log_epochs(1).next_epoch == epoch + 1
        finally:
            store.close()


def _works(store: EpochStore) -> bool:
    try:
        store.log_epochs(1)
        return True
    except EpochStoreUnavailableError:
        return False


def test_unreachable_zookeeper_at_open() -> None:
    from logstrand.testing import free_port

    with pytest.raises(EpochStoreUnavailableError):
        open_epoch_store(f"zk://127.0.0.1:{free_port()}/x", connect_timeout_s=1.0)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "mysql://x",
        "sqlite://",
        "zk://",
        "zk://host/cl",
        "zk://h:1",
        "zk://h:1/a/b",
        "zk://h:1/bad name",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        open_epoch_store(url)


def test_log_range_parsing() -> None:
    assert parse_log_range("1..100") == (1, 100)
    assert parse_log_range("7") == (7, 7)
    for bad in ("", "a", "5..1", "0..3", "1..2..3", str(2**63)):
        with pytest.raises(InvalidArgumentError):
            parse_log_range(bad)


def test_attributes_validate() -> None:
    for bad in (
        {"replication_factor": 0},
        {"replicate_across": "planet"},
        {"nodeset_size": 1, "replication_factor": 2},
        {"retention_ms": 0},
        {"cleanup_policy": "shred"},
        {"min_cleanable_ratio": 1.5},
        {"durability": "never"},
    ):
        with pytest.raises(InvalidArgumentError):
            LogAttributes(**bad)  # type: ignore[arg-type]


async def test_async_store_keeps_the_event_loop_running(tmp_path: Path) -> None:
    import sqlite3

    store = SqliteEpochStore(tmp_path / "c.db")
    astore = AsyncEpochStore(store)
    # Another connection holds the write lock for a while: take_epoch waits in a
    # worker thread, and the event loop goes on meanwhile.
    blocker = sqlite3.connect(tmp_path / "c.db", isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        nursery.start_soon(trio.to_thread.run_sync, _release_later, blocker)
        epoch, _ = await astore.take_epoch(1, P3)
        nursery.cancel_scope.cancel()
    assert epoch == 1
    assert ticks >= 10
    store.close()


def _release_later(conn: object) -> None:
    time.sleep(0.3)
    conn.execute("COMMIT")  # type: ignore[attr-defined]
    conn.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "contract",
    [
        test_epochs_are_handed_out_in_order_with_placement_history,
        test_take_epoch_with_expectation_is_a_compare_and_set,
        test_last_clean_epoch_only_moves_forward,
        test_epoch_ends_are_kept_and_the_highest_seal_wins,
        test_trim_points_only_move_up,
        test_the_trim_feed_names_the_logs_trimmed_since_a_point,
        test_nodes_configuration_round_trip,
        test_logs_configuration_round_trip,
        test_replication_must_fit_the_cluster,
        test_membership_register_watch_and_close,
    ],
)
def test_the_memory_store_keeps_the_contract(contract: Callable[[EpochStore], None]) -> None:
    """The simulation's epoch store is held to the same contract as the real ones."""
    contract(MemoryEpochStore())


def test_epoch_starts_are_kept_until_the_epoch_is_clean(store: EpochStore) -> None:
    for _ in range(3):
        store.take_epoch(1, P3)
    store.set_epoch_start(1, 2, 1000)
    store.set_epoch_start(1, 3, 900)
    assert store.epoch_starts(1) == {2: 1000, 3: 900}
    store.set_last_clean_epoch(1, 2)
    store.set_epoch_start(1, 3, 950)
    assert store.epoch_starts(1) == {3: 950}


def test_a_lease_lost_and_taken_again_counts_as_a_return(tmp_path: Path) -> None:
    """(SQLite: the row went, as when another process found the lease run out.)"""
    from logstrand.epochstore import SqliteEpochStore

    store = SqliteEpochStore(tmp_path / "c.db", lease_s=1.0)
    other = SqliteEpochStore(tmp_path / "c.db", lease_s=1.0)
    try:
        session = store.register_member(5)
        assert session.returns == 0
        with other._tx() as db:
            db.execute("DELETE FROM membership WHERE node_id = 5")
        assert _wait(lambda: session.returns == 1, timeout_s=5)
        assert _wait(lambda: 5 in other.alive_nodes(), timeout_s=5)
        session.close()
    finally:
        store.close()
        other.close()

"""Reads against real node processes: order, failures, data loss, tailing, time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
import trio

import logstrand
from logstrand import Gap, GapType, Record, compose_lsn, lsn_epoch
from logstrand.batch import make_batch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.logsdb import LogsDB, PutBatch
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path


def records(items: list[Record | Gap]) -> list[Record]:
    return [x for x in items if isinstance(x, Record)]


def gaps(items: list[Record | Gap]) -> list[Gap]:
    return [x for x in items if isinstance(x, Gap)]


async def test_concurrent_readers_see_the_same_sequence(cluster: LocalCluster) -> None:
    async with logstrand.open_client(cluster.url) as client:
        lsns = await client.append_batch(20, [b"x%d" % i for i in range(3000)])
        for i in range(50):
            await client.append(20, b"y%d" % i)
        seen: list[list[tuple[int, bytes | None]]] = []

        async def reader() -> None:
            got = []
            async with client.read(20) as r:
                async for item in r:
                    assert isinstance(item, Record)
                    got.append((item.lsn, item.payload))
            seen.append(got)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(reader)
    assert len(seen) == 3
    assert seen[0] == seen[1] == seen[2]
    assert len(seen[0]) == 3050
    assert [lsn for lsn, _ in seen[0][:3000]] == lsns


def test_read_ranges_and_queries(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        assert client.is_empty(21)
        assert client.tail_lsn(21) == 0
        assert list(client.read(21)) == []
        lsns = client.append_batch(21, [b"r%d" % i for i in range(100)])
        assert not client.is_empty(21)
        assert client.tail_lsn(21) >= lsns[-1]
        part = list(client.read(21, lsns[10], lsns[19]))
        assert [r.lsn for r in records(part)] == lsns[10:20]
        assert client.data_size(21) >= 100 * 2
        assert client.trim_point(21) == 0
        with pytest.raises(logstrand.NotFoundError):
            list(client.read(5000))


def test_a_node_killed_during_a_read_changes_nothing_delivered(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            lsns = []
            for i in range(20):
                lsns += client.append_batch(1, [b"%d-%d" % (i, j) for j in range(1000)])
            reader = client.read(1)
            got = [next(reader) for _ in range(3000)]
            c.kill_node(2)
            got += list(reader)
        assert gaps(got) == []
        assert [r.lsn for r in records(got)] == lsns  # all of them, once each, in order


def test_single_copy_delivery_with_a_node_down_still_delivers_everything(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            lsns = [client.append(1, b"r%d" % i) for i in range(300)]
            c.stop_node(3)
            got = list(client.read(1))
            full = list(client.read(1, single_copy=False))
        assert [r.lsn for r in records(got)] == lsns
        # If node 3 ran the sequencer, the read's tail query moves it and recovery
        # closes epoch 1 with a BRIDGE: the end of an epoch, not a loss.
        assert [g for g in gaps(got) if g.type is not GapType.BRIDGE] == []
        assert [r.lsn for r in records(full)] == lsns


def test_copies_destroyed_on_every_holder_are_dataloss_exactly(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            lsns = client.append_batch(1, [b"r%d" % i for i in range(100)])
            lsns += client.append_batch(1, [b"s%d" % i for i in range(100)])
            assert len(list(client.read(1))) == 200
            # Wait until every node has heard the last RELEASE (the sequencer
            # broadcasts releases in batches, so a read that already saw all 200
            # proves it only for the node that sent them): then all 200 are known
            # good, and recovery after the restart will not revisit them.
            for _ in range(200):
                infos = client.log_info(1)
                if len(infos) == 3 and min(i.release_lsn for i in infos) >= lsns[-1]:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"release pointers never reached {lsns[-1]}")
        c.stop()
        doomed = set(lsns[40:43]) | {lsns[150]}
        for node in (1, 2, 3):
            with LogsDB.open(tmp_path / "c" / f"node{node}") as db:
                db.delete(1, doomed, sync=True)
        c.start()
        with logstrand.connect(c.url) as client:
            got = list(client.read(1, until=lsns[-1]))
            arrow_gaps: list[Gap] = []
            arrow = list(client.read_arrow(1, until=lsns[-1], on_gap=arrow_gaps.append))
    assert [(g.type, g.lo, g.hi) for g in gaps(got)] == [
        (GapType.DATALOSS, lsns[40], lsns[42]),
        (GapType.DATALOSS, lsns[150], lsns[150]),
    ]
    assert [r.lsn for r in records(got)] == [x for x in lsns if x not in doomed]
    # The same read as Arrow: the same records, row for row, and the same gaps.
    rows = [row for batch in arrow for row in batch.to_pylist()]
    assert [(r["lsn"], r["payload"], r["key"]) for r in rows] == [
        (r.lsn, r.payload, r.key) for r in records(got)
    ]
    assert all(r["log_id"] == 1 and r["lsn"] == (r["epoch"] << 32) | r["esn"] for r in rows)
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [
        r.timestamp for r in records(got)
    ]
    assert arrow_gaps == gaps(got)


async def test_a_tailing_reader_gets_records_within_milliseconds(cluster: LocalCluster) -> None:
    async with logstrand.open_client(cluster.url) as client:
        await client.append(22, b"start")
        acked: dict[int, float] = {}
        delivered: dict[bytes, tuple[int, float]] = {}

        async def follow() -> None:
            async with client.read(22, until=None) as reader:
                async for item in reader:
                    if isinstance(item, Record) and item.payload.startswith(b"live"):
                        delivered[item.payload] = (item.lsn, trio.current_time())
                        if len(delivered) == 50:
                            return

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.sleep(0.3)
                for i in range(50):
                    lsn = await client.append(22, b"live %d" % i)
                    acked[lsn] = trio.current_time()
                    await trio.sleep(0.01)
    # Delivery may even come before the acknowledgement reaches the appender.
    delays = sorted(max(0.0, t - acked[lsn]) for lsn, t in delivered.values())
    assert len(delays) == 50
    assert delays[25] < 0.010, delays  # the median within 10 ms of the acknowledgement


def test_find_time_on_records_minutes_apart(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "c", nodes=3)
    c.configure()
    with open_epoch_store(c.url) as store:
        store.create_logs(1, 1, LogAttributes(replication_factor=2))
    minute = 60_000
    t0 = 1_700_000_000_000
    lsns = [compose_lsn(1, i) for i in range(1, 11)]
    stamps = [t0 + i * 3 * minute for i in range(10)]  # one record every three minutes
    for node, copyset in ((1, (1, 2)), (2, (1, 2))):
        with LogsDB.open(tmp_path / "c" / f"node{node}") as db:
            db.write([PutBatch.of(1, make_batch(lsns, [b"m"] * 10, timestamps_ms=stamps), copyset)])
            db.set_releases({1: lsns[-1]}, sync=True)
    with c, logstrand.connect(c.url) as client:
        assert client.find_time(1, 0) == lsns[0]
        assert client.find_time(1, stamps[4]) == lsns[4]
        assert client.find_time(1, stamps[4] + 1) == lsns[5]
        assert client.find_time(1, stamps[4] + minute) == lsns[5]
        assert client.find_time(1, stamps[-1] + minute) == lsns[-1] + 1
        assert [r.timestamp for r in records(list(client.read(1)))] == stamps


def test_read_cli(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(23, [b"alpha", b"beta", b"gamma"])
    out = subprocess.run(
        [sys.executable, "-m", "logstrand", "read", "23", "--json", "--url", cluster.url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["lsn"], r["payload"]) for r in rows] == list(
        zip(lsns, ["alpha", "beta", "gamma"], strict=True)
    )
    out = subprocess.run(
        [sys.executable, "-m", "logstrand", "read", "23", "--from", str(lsns[1]), "--url",
         cluster.url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # fmt: skip
    assert "alpha" not in out
    assert "beta" in out
    assert "gamma" in out
    found = subprocess.run(
        [sys.executable, "-m", "logstrand", "find-time", "23", "0", "--json", "--url",
         cluster.url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # fmt: skip
    assert json.loads(found)["lsn"] == lsns[0]
    bad = subprocess.run(
        [sys.executable, "-m", "logstrand", "find-time", "23", "yesterday-ish", "--url",
         cluster.url],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "bad time" in bad.stderr


def test_reading_across_a_sequencer_failover_bridges_the_epochs(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            before = client.append_batch(1, [b"a%d" % i for i in range(10)])
            c.kill_node(c.sequencer_of(1, lsn_epoch(before[0])))
            after = client.append_batch(1, [b"b%d" % i for i in range(10)])
            got = list(client.read(1))
    assert [r.lsn for r in records(got)] == before + after
    assert [g.type for g in gaps(got)] == [GapType.BRIDGE]


async def test_read_many_logs_at_once(cluster: LocalCluster) -> None:
    async with logstrand.open_client(cluster.url) as client:
        a = await client.append_batch(24, [b"a%d" % i for i in range(300)])
        b = await client.append_batch(25, [b"b%d" % i for i in range(200)])
        got: dict[int, list[int]] = {24: [], 25: []}
        async for log, item in client.read_many({24: a[0], 25: b[0]}):
            assert isinstance(item, Record)
            got[log].append(item.lsn)
    assert got == {24: a, 25: b}


def test_tail_after_a_restart_covers_every_acknowledged_record(tmp_path: Path) -> None:
    """Nodes persist release pointers lazily: right after a restart the tail
    must still cover what earlier epochs acknowledged, so read(until=TAIL)
    returns it all instead of nothing."""
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 2, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            client.append_batch(1, [b"q%d" % i for i in range(1500)])
            lsns = client.append_batch(2, [b"r%d" % i for i in range(300)])
        c.stop()
        c.start()
        with logstrand.connect(c.url) as client:
            assert client.tail_lsn(2) >= lsns[-1]
            assert [r.lsn for r in records(list(client.read(2)))] == lsns

"""Clocks that are wrong (nodes run with their wall clock shifted:
``logstrand.testing._skew``) erase nothing, stamp nothing far from the
cluster's clock, and find_time stays right; timestamps never go backwards in
a log across epochs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from logstrand import Record
from logstrand.client import connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

HOUR_MS = 3_600_000


def restart_all(cluster: LocalCluster, offset_ms: int) -> None:
    for n in list(cluster.procs):
        cluster.stop_node(n)
    cluster.clock_offsets = dict.fromkeys(cluster.nodes, offset_ms)
    for n in cluster.nodes:
        cluster.start_node(n)


def test_timestamps_never_go_back_under_skewed_clocks(tmp_path: Path) -> None:
    """Every node's clock an hour ahead, then every one an hour behind (so the
    cluster's clock itself jumps back)."""
    with LocalCluster(
        tmp_path, nodes=3, clock_offsets=dict.fromkeys((1, 2, 3), HOUR_MS)
    ) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with connect(cluster.url) as client:
            ahead = client.append_batch(1, [b"ahead"] * 10)  # stamped an hour ahead
        # Every node now runs an hour *behind*: the next sequencer (a new
        # epoch) stamps with the log's last timestamp, not its own clock.
        restart_all(cluster, -HOUR_MS)
        with connect(cluster.url) as client:
            behind = client.append_batch(1, [b"behind"] * 10)
            assert behind[0] >> 32 > ahead[0] >> 32  # a new epoch
            records = [r for r in client.read(1, 0, client.tail_lsn(1)) if isinstance(r, Record)]
            stamps = [r.timestamp for r in records]
            assert [r.lsn for r in records] == ahead + behind
            assert stamps == sorted(stamps)
            assert stamps[0] > time.time() * 1000 + HOUR_MS / 2
            # find_time: the first record at or after a time.
            assert client.find_time(1, stamps[0]) == ahead[0]
            assert client.find_time(1, stamps[-1] + 1) > behind[-1]


DAY_MS = 86_400_000


@pytest.mark.parametrize("days", [-10, 10])
@pytest.mark.parametrize("kind", ["sqlite", "zookeeper"])
def test_a_wrong_clock_loses_nothing_to_retention(
    tmp_path: Path, kind: str, days: int, request: pytest.FixtureRequest
) -> None:
    """One node's clock is 10 days off; logs keep 7 days.  Nothing may look
    expired to anyone (a slow sequencer stamped fresh records in the past,
    and every node trimmed them), the node stays a member (SQLite leases
    compared wall clocks), says why it takes no sequencers, and find_time
    answers by the cluster's clock."""
    args = ("--partition-duration", "1s", "--maintenance-interval", "0.3")
    offsets = {3: days * DAY_MS}
    zk = request.getfixturevalue("zookeeper").address if kind == "zookeeper" else None
    with LocalCluster(
        tmp_path,
        nodes=3,
        node_args=args,
        clock_offsets=offsets,
        zookeeper=zk,
        cluster=f"skew{kind}{days + 100}",
    ) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 12, LogAttributes(replication_factor=2, retention_ms=7 * DAY_MS))
        with connect(cluster.url) as client:
            started = int(time.time() * 1000)
            acked = {
                log: client.append_batch(log, [b"r%d" % i for i in range(100)])
                for log in range(1, 13)
            }
            # Partitions roll every second (on a write); retention runs every 0.3 s.
            for _ in range(3):
                time.sleep(1.2)
                for log in acked:
                    client.append(log, b"later")
            with open_epoch_store(cluster.url) as store:
                members = store.members()
            assert set(members) == {1, 2, 3}
            assert not members[3].sequencer
            assert members[3].why == f"clock 10.0 d {'ahead' if days > 0 else 'behind'}"
            assert members[1].sequencer
            assert members[2].sequencer
            for log, lsns in acked.items():
                items = list(client.read(log, 1, lsns[-1]))
                got = [r.lsn for r in items if isinstance(r, Record)]
                assert got == lsns, (log, [i for i in items if not isinstance(i, Record)][:3])
                assert client.find_time(log, started - HOUR_MS) == lsns[0]

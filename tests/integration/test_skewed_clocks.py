"""Timestamps never go backwards in a log, across epochs and sequencer nodes
whose clocks disagree (nodes started with --clock-offset), and find_time stays
right."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from logstrand import Record
from logstrand.client import connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

HOUR_MS = 3_600_000


def restart_all(cluster: LocalCluster, *args: str) -> None:
    for n in list(cluster.procs):
        cluster.stop_node(n)
    cluster.node_args = args
    for n in cluster.nodes:
        cluster.start_node(n)


def test_timestamps_never_go_back_under_skewed_clocks(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, nodes=3, node_args=("--clock-offset", str(HOUR_MS))) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with connect(cluster.url) as client:
            ahead = client.append_batch(1, [b"ahead"] * 10)  # stamped an hour ahead
        # Every node now runs an hour *behind*: the next sequencer (a new
        # epoch) stamps with the log's last timestamp, not its own clock.
        restart_all(cluster, "--clock-offset", str(-HOUR_MS))
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

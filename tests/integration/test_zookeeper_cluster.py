"""The whole system on ZooKeeper instead of SQLite: nodes, appends, reads, failover."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import logstrand
from logstrand import Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

    from logstrand.testing import ZooKeeperServer


def test_a_cluster_on_zookeeper(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    name = "zk" + uuid.uuid4().hex[:8]
    with LocalCluster(tmp_path / "c", nodes=3, zookeeper=zookeeper.address, cluster=name) as c:
        assert c.url == f"zk://{zookeeper.address}/{name}"
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
            assert store.alive_nodes() == {1, 2, 3}
        with logstrand.connect(c.url) as client:
            lsns = client.append_batch(1, [b"z%d" % i for i in range(500)])
            c.kill_node(c.sequencer_of(1, lsn_epoch(lsns[0])))
            after = client.append(1, b"after the failover")
            got = [x.lsn for x in client.read(1) if isinstance(x, Record)]
    assert lsn_epoch(after) > lsn_epoch(lsns[0])
    assert got == [*lsns, after]

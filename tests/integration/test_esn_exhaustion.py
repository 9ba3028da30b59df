"""An epoch out of ESNs: the log moves to a new epoch and appends go on, with
one BRIDGE gap between the epochs (nodes started with a lowered --esn-max)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from logstrand import Gap, Record
from logstrand.client import connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster
from logstrand.types import GapType

if TYPE_CHECKING:
    from pathlib import Path


def test_appends_continue_across_the_esn_limit(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, nodes=3, node_args=("--esn-max", "100")) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with connect(cluster.url) as client:
            lsns = [lsn for i in range(15) for lsn in client.append_batch(1, [b"r%d" % i] * 10)]
            lsns.append(client.append(1, b"single"))
            items = list(client.read(1, 0, client.tail_lsn(1)))
        assert [x >> 32 for x in lsns] == [1] * 100 + [2] * 51  # no append failed
        assert [x & 0xFFFFFFFF for x in lsns[:100]] == list(range(1, 101))
        records = [i.lsn for i in items if isinstance(i, Record)]
        assert records == lsns
        gaps = [(g.type, g.lo, g.hi) for g in items if isinstance(g, Gap)]
        assert gaps == [(GapType.BRIDGE, (1 << 32) | 101, 2 << 32)]

"""Spark's source over a tiered log whose nodes dropped their copies
(``--local-retention``): the rows are every record, read from the objects
below the nodes' floors and from the nodes above, whatever the split."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.testing import LocalCluster, MotoServer, moto_available
from logstrand.types import LSN_OLDEST, Record

from ..integration.tier_helpers import cli, credentials_file, wait

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed"),
]


def test_spark_reads_the_records_the_nodes_dropped(spark: Any, tmp_path: Path) -> None:
    creds = credentials_file(tmp_path)
    with MotoServer(tmp_path) as moto:
        moto.create_bucket("tier")
        args = ("--tier-url", "s3://tier/spark", "--tier-endpoint", moto.endpoint,
                "--tier-credentials", str(creds), "--tier-interval", "0.3",
                "--tier-object-size", "64KiB", "--partition-duration", "1s",
                "--maintenance-interval", "0.3")  # fmt: skip
        with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
            cli(c, "logs", "create", "1", "--replication", "2", "--tier-after", "1s",
                "--local-retention", "1s")  # fmt: skip
            with logstrand.connect(c.url) as client:
                for i in range(4):  # four partitions' worth
                    keys = [b"k%d" % (j % 3) for j in range(300)]
                    client.append_batch(1, [b"s%d.%d" % (i, j) for j in range(300)], keys=keys)
                    time.sleep(1.2)
                want = sorted(
                    (r.lsn, r.key, r.payload)
                    for r in client.read(1, LSN_OLDEST, client.tail_lsn(1))
                    if isinstance(r, Record)
                )

                def dropped() -> bool:
                    name = "logstrand_partitions_dropped_total"
                    return sum(c.metric(n, name, 0.0) > 0 for n in (1, 2, 3)) >= 2

                wait("the nodes dropped tiered partitions", dropped)
            df = (
                spark.read.format("logstrand")
                .option("url", c.url)
                .option("logs", "1")
                .option("minPartitions", "4")
                .load()
            )
            got = sorted(
                (r.lsn, None if r.key is None else bytes(r.key), bytes(r.payload))
                for r in df.collect()
            )
            assert got == want

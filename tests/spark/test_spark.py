"""The ``logstrand`` data source through Spark itself, against a real cluster.

Each test uses its own logs of the module's cluster (see conftest).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.logsdb import LogsDB
from logstrand.testing import LocalCluster
from logstrand.types import Record, lsn_epoch

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def source(spark: Any, url: str, logs: str, **options: Any) -> Any:
    reader = spark.read.format("logstrand").option("url", url).option("logs", logs)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def rows(df: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return sorted(
        (r.log_id, r.lsn, None if r.key is None else bytes(r.key), bytes(r.payload))
        for r in df.collect()
    )


def client_rows(url: str, log: int, start: int = 1) -> list[tuple[int, int, Any, bytes]]:
    with logstrand.connect(url) as client:
        return [
            (log, r.lsn, r.key, r.payload) for r in client.read(log, start) if isinstance(r, Record)
        ]


def test_full_read_equals_the_client_across_epochs(spark: Any, cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        client.append_batch(
            1, [b"a%d" % i for i in range(1500)], keys=[b"k%d" % (i % 7) for i in range(1500)]
        )
        client.append_batch(2, [b"b%d" % i for i in range(300)])
    cluster.stop()  # every sequencer comes back in a new epoch
    cluster.start()
    with logstrand.connect(cluster.url) as client:
        client.append_batch(1, [b"c%d" % i for i in range(1500)])
    expected = client_rows(cluster.url, 1) + client_rows(cluster.url, 2)
    assert len({lsn_epoch(lsn) for log, lsn, _, _ in expected if log == 1}) == 2

    df = source(spark, cluster.url, "1-2", minPartitions=5)
    assert df.rdd.getNumPartitions() >= 5
    got = df.collect()
    assert sorted(
        (r.log_id, r.lsn, r.key and bytes(r.key), bytes(r.payload)) for r in got
    ) == sorted(expected)
    r0 = next(r for r in got if r.log_id == 1)
    assert (r0.epoch, r0.esn) == (r0.lsn >> 32, r0.lsn & 0xFFFFFFFF)
    assert r0.timestamp.year >= 2025
    # The same through SQL.
    spark.sql(
        f"CREATE OR REPLACE TEMP VIEW l12 USING logstrand OPTIONS (url '{cluster.url}', logs '1-2')"
    )
    assert spark.sql("SELECT count(*) AS n FROM l12 WHERE log_id = 2").first().n == 300
    by_key = spark.sql(
        "SELECT key, count(*) AS n FROM l12 WHERE key IS NOT NULL GROUP BY key"
    ).collect()
    assert sum(r.n for r in by_key) == 1500
    assert len(by_key) == 7


def test_lsn_ranges_and_timestamps_select_exactly(spark: Any, cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        first = client.append_batch(3, [b"early%d" % i for i in range(200)])
        time.sleep(0.05)
        second = client.append_batch(3, [b"late%d" % i for i in range(200)])
        late = next(r for r in client.read(3) if isinstance(r, Record) and r.lsn == second[0])
    lsns = first + second
    # LSNs: endingLSN is excluded, as Kafka's endingOffsets.
    df = source(
        spark,
        cluster.url,
        "3",
        startingLSN=f'{{"3": {lsns[50]}}}',
        endingLSN=f'{{"3": "e{lsn_epoch(lsns[300])}n{lsns[300] & 0xFFFFFFFF}"}}',
        minPartitions=3,
    )
    assert [r[1] for r in rows(df)] == lsns[50:300]
    # Timestamps: from the first record at or after startingTimestamp.
    df = source(spark, cluster.url, "3", startingTimestamp=late.timestamp)
    got = rows(df)
    assert [r[1] for r in got] == second
    assert got[0][3] == b"late0"
    df = source(spark, cluster.url, "3", endingTimestamp=late.timestamp)
    assert [r[1] for r in rows(df)] == first


def test_write_then_read_back(spark: Any, cluster: LocalCluster) -> None:
    data = [(b"k%d" % (i % 5), b"row%d" % i) for i in range(2000)]
    df = spark.createDataFrame(data, "key binary, payload binary").repartition(2)
    df.write.format("logstrand").option("url", cluster.url).option("log", "4").mode("append").save()
    back = rows(source(spark, cluster.url, "4"))
    assert sorted((k, p) for _, _, k, p in back) == sorted(data)
    # The log from a column; strings are taken as UTF-8.
    spark.createDataFrame(
        [(5, "x"), (6, "y"), (5, "z")], "log_id bigint, payload string"
    ).write.format("logstrand").option("url", cluster.url).mode("append").save()
    # Each task appends its rows in order; tasks run side by side.
    got = rows(source(spark, cluster.url, "5-6"))
    assert sorted((log, p) for log, _, _, p in got) == [(5, b"x"), (5, b"z"), (6, b"y")]
    with pytest.raises(Exception, match="append-only"):
        df.write.format("logstrand").option("url", cluster.url).option("log", "4").mode(
            "overwrite"
        ).save()


def test_logs_without_records_read_as_no_rows(spark: Any, cluster: LocalCluster) -> None:
    """The plan has no partition then, and PySpark reads one of its own
    (once an AssertionError in the executor: docs/spark.md's first snippet
    on a new cluster)."""
    df = source(spark, cluster.url, "90-92")
    assert df.count() == 0
    assert df.collect() == []


def test_keys_and_payloads_read_as_strings_when_asked(spark: Any, cluster: LocalCluster) -> None:
    """Keys are usually text, and bytes show as hex ("[6B 32]") in Spark:
    ``stringColumns`` reads them as UTF-8 strings."""
    with logstrand.connect(cluster.url) as client:
        client.append_batch(93, [b"ada", b"grace"], keys=[b"k1", b"k2"])
        client.append(94, b"\xff\xfe", key=b"k3")
    df = source(spark, cluster.url, "93", stringColumns="key")
    assert dict(df.dtypes)["key"] == "string"
    assert dict(df.dtypes)["payload"] == "binary"
    assert sorted((r.key, bytes(r.payload)) for r in df.collect()) == [
        ("k1", b"ada"),
        ("k2", b"grace"),
    ]
    both = source(spark, cluster.url, "93", stringColumns="key,payload")
    assert sorted((r.key, r.payload) for r in both.collect()) == [("k1", "ada"), ("k2", "grace")]
    rows_ = both.groupBy("key").count().collect()
    assert sorted((r.key, r["count"]) for r in rows_) == [("k1", 1), ("k2", 1)]
    with pytest.raises(Exception, match="not UTF-8"):
        source(spark, cluster.url, "94", stringColumns="payload").collect()
    with pytest.raises(Exception, match="stringColumns"):
        source(spark, cluster.url, "93", stringColumns="lsn").collect()


def test_bad_options_fail_the_query_clearly(spark: Any, cluster: LocalCluster) -> None:
    with pytest.raises(Exception, match="logs"):
        source(spark, cluster.url, "1-x").count()
    with pytest.raises(Exception, match=r"does not exist|NOTFOUND"):
        source(spark, cluster.url, "9999").count()


def test_streaming_available_now_and_restart(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    with logstrand.connect(cluster.url) as client:
        old = client.append_batch(7, [b"old%d" % i for i in range(900)])
    out, ck = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> list[int]:
        q = (
            spark.readStream.format("logstrand")
            .option("url", cluster.url)
            .option("logs", "7")
            .option("startingLSN", "earliest")
            .option("maxRecordsPerTrigger", "400")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert run() == [400, 400, 100]
    with logstrand.connect(cluster.url) as client:
        new = client.append_batch(7, [b"new%d" % i for i in range(250)])
    assert run() == [250]  # from the checkpoint: exactly what is new
    got = sorted(r.lsn for r in spark.read.parquet(str(out)).select("lsn").collect())
    assert got == old + new


def test_dataloss_fails_or_is_skipped(spark: Any, tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            lsns = client.append_batch(1, [b"r%d" % i for i in range(300)])
            for _ in range(300):  # every node knows all 300 are released
                infos = client.log_info(1)
                if len(infos) == 3 and min(i.release_lsn for i in infos) >= lsns[-1]:
                    break
                time.sleep(0.02)
        c.stop()
        doomed = set(lsns[100:110])
        for node in (1, 2, 3):
            with LogsDB.open(tmp_path / "c" / f"node{node}") as db:
                db.delete(1, doomed, sync=True)
        c.start()
        with pytest.raises(Exception, match="DATALOSS"):
            source(spark, c.url, "1", endingLSN=f'{{"1": {lsns[-1] + 1}}}').count()
        got = rows(
            source(spark, c.url, "1", failOnDataLoss="false", endingLSN=f'{{"1": {lsns[-1] + 1}}}')
        )
        assert [r[1] for r in got] == [x for x in lsns if x not in doomed]

"""Spark's retries against the logstrand sinks: a failed write task and a
micro-batch run again append nothing twice; a stream with ``group``
commits its position (docs/spark.md, "Which failures give exactly-once")."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.idempotence import derived_id
from logstrand.spark import LogstrandDataSource, LogstrandWriter
from logstrand.types import Record

if TYPE_CHECKING:
    from pathlib import Path

    from logstrand.testing import LocalCluster

pytestmark = pytest.mark.slow


def payload_counts(url: str, log: int) -> Counter[bytes]:
    with logstrand.connect(url) as client:
        return Counter(
            r.payload for r in client.read(log) if isinstance(r, Record) and r.payload is not None
        )


def flaky_source(name: str, *, same_id_on_retry: bool) -> type:
    """A ``logstrand`` source whose write tasks fail after appending all their
    rows, on their first attempt: Spark (local[2,2]) runs each once more."""

    class Flaky(LogstrandWriter):
        def producer_id(self, partition: int) -> int:
            from pyspark import TaskContext

            if same_id_on_retry:
                return super().producer_id(partition)
            attempt = TaskContext.get().attemptNumber()  # type: ignore[union-attr]
            return derived_id("no-idempotence", self.write_id, partition, attempt)

        def write(self, iterator: Any) -> Any:
            from pyspark import TaskContext

            message = super().write(iterator)
            if TaskContext.get().attemptNumber() == 0:  # type: ignore[union-attr]
                raise RuntimeError("the task dies after its appends were acknowledged")
            return message

    class Source(LogstrandDataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def writer(self, schema: Any, overwrite: bool) -> Any:
            plain = super().writer(schema, overwrite)
            return Flaky(plain.opts, plain.write_id)

    return Source


def test_a_retried_write_task_appends_its_rows_once(spark: Any, cluster: LocalCluster) -> None:
    data = [(b"row%d" % i,) for i in range(3000)]
    for name, log, same in (("flaky_same", 20, True), ("flaky_new", 21, False)):
        spark.dataSource.register(flaky_source(name, same_id_on_retry=same))
        df = spark.createDataFrame(data, "payload binary").repartition(2)
        df.write.format(name).option("url", cluster.url).option("log", str(log)).mode(
            "append"
        ).save()
    once = payload_counts(cluster.url, 20)
    assert once == Counter(p for (p,) in data)  # every row exactly once
    # The same failures with a new producer id per attempt (as before the
    # derived ids): every row twice.
    twice = payload_counts(cluster.url, 21)
    assert set(twice.values()) == {2}
    assert len(twice) == len(data)


def test_a_micro_batch_run_again_appends_nothing_twice_and_the_group_is_committed(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    with logstrand.connect(cluster.url) as client:
        source_lsns = client.append_batch(22, [b"in%d" % i for i in range(500)])
    ck = tmp_path / "checkpoint"

    def run() -> int:
        q = (
            spark.readStream.format("logstrand")
            .option("url", cluster.url)
            .option("logs", "22")
            .option("startingLSN", "earliest")
            .option("group", "spark-copy")
            .load()
            .select("key", "payload")
            .writeStream.format("logstrand")
            .option("url", cluster.url)
            .option("log", "23")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return sum(p["numInputRows"] for p in q.recentProgress)

    assert run() == 500
    assert payload_counts(cluster.url, 23) == Counter(b"in%d" % i for i in range(500))
    with logstrand.connect(cluster.url) as client:
        assert client.committed("spark-copy", 22) == source_lsns[-1]
        (lag,) = client.describe_group("spark-copy")
        assert lag.lag_records == 0
    # The driver died after the micro-batch's rows were appended but before
    # Spark recorded the batch as done: at restart Spark runs batch 0 again,
    # with the same query id and batch id, hence the same producer ids.
    for name in ("0", ".0.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    assert run() == 500  # batch 0 ran again, and its sink wrote all of it again
    assert payload_counts(cluster.url, 23) == Counter(b"in%d" % i for i in range(500))


def committed_counts(url: str, log: int, want: Counter[bytes]) -> Counter[bytes]:
    """What a committed reader of ``log`` gets, read again (for at most 30 s)
    until it is ``want``: a commit answers once its decision is written,
    and the markers that make its records visible follow at once, in the
    background, as Kafka's do (docs/transactions.md); a read to the tail
    just after the answer may stop before them.  Rows an aborted attempt
    left, or rows missing for good, never turn into ``want``."""
    deadline = time.monotonic() + 30
    while True:
        with logstrand.connect(url) as client:
            got = Counter(
                r.payload
                for r in client.read(log, isolation="committed")
                if isinstance(r, Record) and r.payload is not None
            )
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_a_write_in_transactions_is_committed_by_the_driver_once(
    spark: Any, cluster: LocalCluster
) -> None:
    """``transactionalId``: each task's rows in a transaction the driver
    commits.  Every first attempt dies after writing its rows: its retry
    starts the id's producer at a new epoch, which aborts them, so
    committed readers (the client, and Spark's source with
    ``isolation=read_committed``) get every row once, while an uncommitted
    read shows the aborted attempts too."""
    data = [(b"tx%d" % i,) for i in range(3000)]
    spark.dataSource.register(flaky_source("flaky_txn", same_id_on_retry=True))
    df = spark.createDataFrame(data, "payload binary").repartition(2)
    df.write.format("flaky_txn").option("url", cluster.url).option("log", "24").option(
        "transactionalId", "spark-txn"
    ).mode("append").save()
    want = Counter(p for (p,) in data)
    assert committed_counts(cluster.url, 24, want) == want
    assert set(payload_counts(cluster.url, 24).values()) == {2}  # the aborted attempts
    for isolation, n in (("read_committed", 3000), ("read_uncommitted", 6000)):
        read = (
            spark.read.format("logstrand")
            .option("url", cluster.url)
            .option("logs", "24")
            .option("isolation", isolation)
            .option("minPartitions", "3")
            .load()
        )
        assert read.count() == n, isolation
    with logstrand.connect(cluster.url) as client:
        tags = {client.transaction_state(f"spark-txn-{p}")["tag"] for p in (0, 1)}
    assert len(tags) == 1  # the write's id, on both tasks' ids


def test_a_micro_batch_run_again_in_transactions_writes_nothing_twice(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """A stream with ``transactionalId``: the driver commits each
    micro-batch's transactions with the query's id and the batch's number;
    when Spark runs batch 0 again (the driver died before it recorded it),
    each task finds its id's last commit is that batch and writes nothing."""
    with logstrand.connect(cluster.url) as client:
        client.append_batch(25, [b"s%d" % i for i in range(400)])
    ck = tmp_path / "checkpoint"

    def run() -> None:
        q = (
            spark.readStream.format("logstrand")
            .option("url", cluster.url)
            .option("logs", "25")
            .option("startingLSN", "earliest")
            .option("isolation", "read_committed")
            .load()
            .select("key", "payload")
            .writeStream.format("logstrand")
            .option("url", cluster.url)
            .option("log", "26")
            .option("transactionalId", "spark-stream")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None

    run()
    want = Counter(b"s%d" % i for i in range(400))
    assert committed_counts(cluster.url, 26, want) == want
    for name in ("0", ".0.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    run()
    assert committed_counts(cluster.url, 26, want) == want
    assert payload_counts(cluster.url, 26) == want  # nothing written again at all

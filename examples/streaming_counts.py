"""A streaming job that keeps per-key counts of a log, restartable.

    python examples/streaming_counts.py --url "sqlite://$PWD/run-data/demo/cluster.db" \
        --log 1 --state /tmp/counts [--once]

Tails the log with Structured Streaming (offsets, one next LSN per log, live
in ``STATE/checkpoint``) and after every micro-batch writes the full table of
counts per key to ``STATE/counts`` (Parquet, replaced each time).  Stop it
and start it again: it goes on from the checkpoint and counts every record
exactly once.  ``--once`` reads what is there now and stops
(``trigger(availableNow=True)``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def run(spark: Any, url: str, log: int, state: str, *, once: bool = True) -> Any:
    """Start the query (and, with ``once``, wait for it); returns the query."""
    import logstrand.spark

    logstrand.spark.register(spark)
    counts_path = os.path.join(state, "counts")

    def save(batch: Any, batch_id: int) -> None:
        # The aggregation state lives in the checkpoint; each batch carries
        # the whole table (complete mode), so the newest write is the answer.
        batch.write.mode("overwrite").parquet(counts_path)
        if not once:
            print(f"batch {batch_id}: {batch.count()} keys written to {counts_path}", flush=True)

    counts = (
        spark.readStream.format("logstrand")
        .option("url", url)
        .option("logs", str(log))
        .option("startingLSN", "earliest")
        .option("maxRecordsPerTrigger", "100000")
        .load()
        .groupBy("key")
        .count()
    )
    writer = (
        counts.writeStream.outputMode("complete")
        .foreachBatch(save)
        .option("checkpointLocation", os.path.join(state, "checkpoint"))
    )
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="1 second")
    query = writer.start()
    if once:
        query.awaitTermination()
    return query


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--url", required=True, help="the cluster's epoch store URL")
    ap.add_argument("--log", type=int, required=True)
    ap.add_argument("--state", required=True, help="directory for checkpoint and counts")
    ap.add_argument("--once", action="store_true", help="read what is there now, then stop")
    args = ap.parse_args()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("logstrand-counts").getOrCreate()
    try:
        query = run(spark, args.url, args.log, args.state, once=args.once)
        if not args.once:
            query.awaitTermination()
        else:
            print_counts(spark, args.state)
    finally:
        spark.stop()


def print_counts(spark: Any, state: str, top: int = 20) -> None:
    """What the counts say now: the busiest keys and the totals."""
    path = os.path.join(state, "counts")
    if not os.path.exists(path):
        print("no records yet")
        return
    rows = spark.read.parquet(path).orderBy("count", ascending=False).collect()
    total = sum(r["count"] for r in rows)
    print(f"{total} records, {len(rows)} keys; the busiest:")
    for r in rows[:top]:
        key = "(no key)" if r.key is None else bytes(r.key).decode(errors="backslashreplace")
        print(f"{r['count']:>10}  {key}")


if __name__ == "__main__":
    main()

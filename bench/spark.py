"""Spark backfill through the ``logstrand`` data source, against Parquet.

    python bench/spark.py [--records 1000000] [--repeat 3] [--partitions 4]
                          [--json bench/results/spark.json]

A local 3-node cluster (R=2) gets ``--records`` records of 100 B over 1,000
keys; then one local[2] SparkSession runs, ``--repeat`` times each:

- ``count()`` of the whole log;
- ``groupBy(key).count()`` of it, collected;
- ``sum(length(payload))``: every payload through the JVM;

and the same three on a Parquet copy of the very same rows, written by the
same session.  Rows/s are medians; the ratio is logstrand over Parquet.
Parquet's ``count()`` reads only footers: its ratio says how far a log scan
is from no scan at all.  For the logstrand ``count()`` it also prints where
the machine's CPU went: the three nodes, and everything else (Spark's JVM,
its Python workers, this driver), in cores busy, from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from logstrand.client import open_client
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, cpu_s

LOG = 1
KEYS = 1000
SIZE = 100


async def _fill(url: str, n: int) -> float:
    pad = b"." * (SIZE - 12)
    t0 = time.perf_counter()
    async with open_client(url) as client:
        window = 10_000
        sem = trio.Semaphore(4)

        async def one(lo: int) -> None:
            async with sem:
                hi = min(n, lo + window)
                await client.append_batch(
                    LOG,
                    [b"%012d" % i + pad for i in range(lo, hi)],
                    keys=[b"key-%d" % (i % KEYS) for i in range(lo, hi)],
                )

        async with trio.open_nursery() as nursery:
            for lo in range(0, n, window):
                nursery.start_soon(one, lo)
    return n / (time.perf_counter() - t0)


def _session(tmp: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import logstrand.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.warehouse.dir", tmp)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    logstrand.spark.register(spark)
    return spark


def _time(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _busy_s() -> float:
    """CPU seconds the whole machine spent busy so far (all cores, /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4, help="minPartitions of the read")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    n = args.records

    with (
        tempfile.TemporaryDirectory(prefix="logstrand-spark-") as tmp,
        LocalCluster(Path(tmp) / "cluster", nodes=3) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(LOG, LOG, LogAttributes(replication_factor=2))
        fill = trio.run(_fill, cluster.url, n)
        print(f"appended {n:,} x {SIZE} B in the log: {fill:,.0f} rec/s", file=sys.stderr)

        from pyspark.sql import functions as F

        spark = _session(str(Path(tmp) / "warehouse"))
        try:
            df = (
                spark.read.format("logstrand")
                .option("url", cluster.url)
                .option("logs", str(LOG))
                .option("minPartitions", str(args.partitions))
                .load()
            )
            parquet_path = str(Path(tmp) / "copy.parquet")
            df.write.parquet(parquet_path)  # also warms the Python workers up
            pq = spark.read.parquet(parquet_path)
            assert df.count() == n == pq.count()

            queries = {
                "count()": lambda d: d.count(),
                "groupBy(key).count()": lambda d: d.groupBy("key").count().collect(),
                "sum(length(payload))": lambda d: d.agg(F.sum(F.length("payload"))).collect(),
            }
            results: list[dict[str, Any]] = []
            pids = [p.pid for p in cluster.procs.values()]
            nodes0, busy0, t0 = cpu_s(pids), _busy_s(), time.perf_counter()
            for _ in range(args.repeat):
                df.count()
            wall = time.perf_counter() - t0
            nodes_cores = (cpu_s(pids) - nodes0) / wall
            rest_cores = (_busy_s() - busy0) / wall - nodes_cores
            for name, q in queries.items():
                ours = [n / _time(lambda q=q: q(df)) for _ in range(args.repeat)]
                theirs = [n / _time(lambda q=q: q(pq)) for _ in range(args.repeat)]
                results.append(
                    {
                        "query": name,
                        "logstrand_rows_s": statistics.median(ours),
                        "parquet_rows_s": statistics.median(theirs),
                        "logstrand_runs": ours,
                        "parquet_runs": theirs,
                    }
                )
        finally:
            spark.stop()

    print(f"\n{n:,} records x {SIZE} B, 3 nodes R=2, local[2], minPartitions={args.partitions}")
    print(f"medians of {args.repeat} runs\n")
    print("| query | logstrand rows/s | Parquet rows/s | logstrand / Parquet |")
    print("|---|---:|---:|---:|")
    for r in results:
        ratio = r["logstrand_rows_s"] / r["parquet_rows_s"]
        print(
            f"| {r['query']} | {r['logstrand_rows_s']:,.0f} | {r['parquet_rows_s']:,.0f} "
            f"| {ratio:.2f}x |"
        )
    print(
        f"\nduring logstrand count(): nodes {nodes_cores:.2f} cores, "
        f"everything else (JVM, Python workers, driver) {rest_cores:.2f} cores, "
        f"of {os.cpu_count()}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "records": n,
                    "payload_bytes": SIZE,
                    "partitions": args.partitions,
                    "repeat": args.repeat,
                    "fill_rec_s": fill,
                    "count_cpu_cores": {"nodes": nodes_cores, "rest": rest_cores},
                    "results": results,
                    "cores": os.cpu_count(),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()

"""Spark backfill through the ``logstrand`` data source, against Parquet.

    python bench/spark.py [--records 1000000] [--repeat 3] [--partitions 4]
                          [--json bench/results/spark.json]

A local 3-node cluster (R=2) gets ``--records`` records of 100 B over 1,000
keys; then one local[2] SparkSession runs, ``--repeat`` times each:

- ``count()`` of the whole log;
- ``groupBy(key).count()`` of it, collected;
- ``sum(length(payload))``: every payload through the JVM;

and the same three on a Parquet copy of the very same rows, written by the
same session, and ``count()`` through a Python data source that yields the very
Arrow batches the logstrand source yields, from memory-mapped Arrow IPC files
written beforehand (the ceiling of Spark's Python Data Source here: what is left
when reading the log costs nothing).  Rows/s are medians; the ratio is
logstrand over Parquet (and over the in-memory source).

Before Spark starts, one client reads the whole log back as numpy columns
(``read_columns``), and the nodes' CPU seconds per million records and peak RSS
during that backfill are printed: a node's memory must stay bounded by its read
windows, not grow with the log.
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

from logstrand.client import connect, open_client
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, cpu_s, rss_mb

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


def _backfill(url: str, pids: list[int]) -> dict[str, float]:
    """Read the log as numpy columns; records/s, nodes' CPU s per million
    records and each node's peak RSS (sampled every 20 ms)."""
    import threading

    peaks = dict.fromkeys(pids, 0.0)
    before = {p: rss_mb(p) for p in pids}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            for p in pids:
                peaks[p] = max(peaks[p], rss_mb(p))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    n0, t0, count = cpu_s(pids), time.perf_counter(), 0
    with connect(url) as client:
        for batch in client.read_columns(LOG):
            count += len(batch.lsn)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    return {
        "records": count,
        "rec_s": count / wall,
        "node_cpu_s_per_million": (cpu_s(pids) - n0) / count * 1e6,
        "rss_before_mb": max(before.values()),
        "rss_peak_mb": max(peaks.values()),
    }


def _memory_source(url: str, opts: dict[str, str], where: Path) -> dict[str, str]:
    """Write the Arrow batches the logstrand source yields for each of its
    partitions into an Arrow IPC file, and return the options of a source that
    serves them from memory."""
    import pyarrow as pa

    from logstrand.spark import LOG_SCHEMA
    from logstrand.spark._source import LogstrandDataSource, read_range

    reader = LogstrandDataSource(opts).reader(LOG_SCHEMA)
    parts = reader.partitions()
    with connect(url) as client:
        for i, part in enumerate(parts):
            batches = list(read_range(client, part))  # type: ignore[arg-type]
            with (
                pa.OSFile(str(where / f"{i}.arrow"), "wb") as f,
                pa.ipc.new_file(f, batches[0].schema) as w,
            ):
                for b in batches:
                    w.write_batch(b)
    return {"dir": str(where), "parts": str(len(parts))}


def _register_memory_source(spark: Any) -> None:
    """A Python data source over the IPC files ``_memory_source`` wrote: each
    partition memory-maps its file and yields its batches (zero copy)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from logstrand.spark import LOG_SCHEMA

    class MemoryReader(DataSourceReader):
        def __init__(self, where: str, parts: int) -> None:
            self.where, self.parts = where, parts

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            source = pa.memory_map(f"{self.where}/{partition.value}.arrow")
            f = pa.ipc.open_file(source)
            for i in range(f.num_record_batches):
                yield f.get_batch(i)

    class MemoryArrow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_memory"

        def schema(self) -> Any:
            return LOG_SCHEMA

        def reader(self, schema: Any) -> MemoryReader:
            return MemoryReader(self.options["dir"], int(self.options["parts"]))

    spark.dataSource.register(MemoryArrow)


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
        pids = [p.pid for p in cluster.procs.values()]
        backfills = [_backfill(cluster.url, pids) for _ in range(args.repeat)]
        backfill = {k: statistics.median(b[k] for b in backfills) for k in backfills[0]}
        backfill["rss_peak_mb"] = max(b["rss_peak_mb"] for b in backfills)
        source = {"url": cluster.url, "logs": str(LOG), "minPartitions": str(args.partitions)}
        (Path(tmp) / "arrow").mkdir()
        memory = _memory_source(cluster.url, source, Path(tmp) / "arrow")

        from pyspark.sql import functions as F

        spark = _session(str(Path(tmp) / "warehouse"))
        try:
            df = spark.read.format("logstrand").options(**source).load()
            _register_memory_source(spark)
            mem = spark.read.format("arrow_memory").options(**memory).load()
            parquet_path = str(Path(tmp) / "copy.parquet")
            df.write.parquet(parquet_path)  # also warms the Python workers up
            pq = spark.read.parquet(parquet_path)
            assert df.count() == n == pq.count() == mem.count()

            queries = {
                "count()": lambda d: d.count(),
                "groupBy(key).count()": lambda d: d.groupBy("key").count().collect(),
                "sum(length(payload))": lambda d: d.agg(F.sum(F.length("payload"))).collect(),
            }
            results: list[dict[str, Any]] = []
            nodes0, busy0, t0 = cpu_s(pids), _busy_s(), time.perf_counter()
            for _ in range(args.repeat):
                df.count()
            wall = time.perf_counter() - t0
            nodes_cores = (cpu_s(pids) - nodes0) / wall
            rest_cores = (_busy_s() - busy0) / wall - nodes_cores
            for name, q in queries.items():
                ours, theirs, mems = [], [], []
                for _ in range(args.repeat):  # alternating: the machine's noise hits all
                    ours.append(n / _time(lambda q=q: q(df)))
                    theirs.append(n / _time(lambda q=q: q(pq)))
                    if name == "count()":
                        mems.append(n / _time(mem.count))
                results.append(
                    {
                        "query": name,
                        "logstrand_rows_s": statistics.median(ours),
                        "parquet_rows_s": statistics.median(theirs),
                        "memory_rows_s": statistics.median(mems) if mems else None,
                        "logstrand_runs": ours,
                        "parquet_runs": theirs,
                        "memory_runs": mems,
                    }
                )
        finally:
            spark.stop()

    print(f"\n{n:,} records x {SIZE} B, 3 nodes R=2, local[2], minPartitions={args.partitions}")
    print(f"medians of {args.repeat} runs\n")
    print(
        "| query | logstrand rows/s | Parquet rows/s | logstrand / Parquet "
        "| in-memory Arrow source rows/s | logstrand / in-memory |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        ratio = r["logstrand_rows_s"] / r["parquet_rows_s"]
        mem_rows = r["memory_rows_s"]
        mem_cells = (
            f"{mem_rows:,.0f} | {r['logstrand_rows_s'] / mem_rows:.2f}x" if mem_rows else "- | -"
        )
        print(
            f"| {r['query']} | {r['logstrand_rows_s']:,.0f} | {r['parquet_rows_s']:,.0f} "
            f"| {ratio:.2f}x | {mem_cells} |"
        )
    print(
        f"\nduring logstrand count(): nodes {nodes_cores:.2f} cores, "
        f"everything else (JVM, Python workers, driver) {rest_cores:.2f} cores, "
        f"of {os.cpu_count()}"
    )
    print(
        f"backfill of the log as numpy columns (read_columns), one client: "
        f"{backfill['rec_s']:,.0f} rec/s, nodes' CPU {backfill['node_cpu_s_per_million']:.2f} s "
        f"per million records, node RSS {backfill['rss_before_mb']:.0f} MiB before, "
        f"{backfill['rss_peak_mb']:.0f} MiB at the peak"
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
                    "backfill": backfill,
                    "results": results,
                    "cores": os.cpu_count(),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()

"""The Spark sink: rows written through ``df.write.format("logstrand")``, and
the writer's own path without Spark, packed from Arrow buffers against the
Python lists it used to build.

    python bench/spark_sink.py [--records 1000000] [--repeat 3] [--json PATH]

A local 3-node cluster (R=2).  Spark (local[2]) writes a cached DataFrame
of ``--records`` rows (100 B payloads, 1,000 keys) into a fresh log each
run.  Then, with no Spark, one client appends the same rows as Arrow record
batches of 65,536 rows, each APPEND's body built two ways, alternating, into
fresh logs: ``append_arrow`` (straight from the columns' buffers: what the
sink does) and ``to_pylist`` + ``append_batch`` (a Python bytes object per
row: what it did before).  Rows/s are medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from logstrand.client import connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, cpu_s

sys.path.insert(0, str(Path(__file__).parent))
from spark import _busy_s, _session

KEYS = 1000
ROWS_PER_BATCH = 65_536


def _batches(n: int) -> list[Any]:
    import pyarrow as pa

    out = []
    for start in range(0, n, ROWS_PER_BATCH):
        ids = range(start, min(n, start + ROWS_PER_BATCH))
        out.append(
            pa.record_batch(
                {
                    "key": [b"k%d" % (i % KEYS) for i in ids],
                    "payload": [b"%010d" % i + b"x" * 90 for i in ids],
                }
            )
        )
    return out


def _client_runs(url: str, batches: list[Any], logs: list[int], repeat: int) -> dict[str, Any]:
    n = sum(len(b) for b in batches)
    arrow, lists = [], []
    with connect(url) as client:
        client.append_batch(logs[-1], [b"warm"])
        for r in range(repeat):
            t0 = time.perf_counter()
            for b in batches:
                client.append_arrow(logs[2 * r], b)
            arrow.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for b in batches:
                client.append_batch(
                    logs[2 * r + 1], b["payload"].to_pylist(), keys=b["key"].to_pylist()
                )
            lists.append(n / (time.perf_counter() - t0))
    return {
        "append_arrow_rows_s": statistics.median(arrow),
        "pylist_append_batch_rows_s": statistics.median(lists),
        "append_arrow_runs": arrow,
        "pylist_append_batch_runs": lists,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    n = args.records
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-sink-") as tmp,
        LocalCluster(Path(tmp) / "cluster", nodes=3) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 99, LogAttributes(replication_factor=2))
        spark = _session(str(Path(tmp) / "warehouse"))
        try:
            df = spark.range(n).selectExpr(
                f"cast(id % {KEYS} as string) as key",
                "concat(lpad(cast(id as string), 10, '0'), repeat('x', 90)) as payload",
            )
            df.cache().count()
            sink, pids = [], [p.pid for p in cluster.procs.values()]
            for r in range(args.repeat + 1):  # the first run warms the Python workers
                if r == 1:
                    nodes0, busy0, w0 = cpu_s(pids), _busy_s(), time.perf_counter()
                t0 = time.perf_counter()
                df.write.format("logstrand").option("url", cluster.url).option(
                    "log", str(10 + r)
                ).mode("append").save()
                if r:
                    sink.append(n / (time.perf_counter() - t0))
            wall = time.perf_counter() - w0
            nodes_cores = (cpu_s(pids) - nodes0) / wall
            rest_cores = (_busy_s() - busy0) / wall - nodes_cores
            print(f"during the sink: nodes {nodes_cores:.2f} cores, the rest {rest_cores:.2f}")
        finally:
            spark.stop()
        with connect(cluster.url) as client:
            assert client.tail_lsn(10) is not None
        if not hasattr(client, "append_arrow"):  # run on code from before it, for the sink alone
            print(f"Spark sink: {statistics.median(sink):,.0f} rows/s {sink}")
            return
        client_side = _client_runs(cluster.url, _batches(n), list(range(20, 40)), args.repeat)
    result = {
        "records": n,
        "repeat": args.repeat,
        "spark_sink_rows_s": statistics.median(sink),
        "spark_sink_runs": sink,
        "sink_cpu_cores": {"nodes": nodes_cores, "rest": rest_cores},
        **client_side,
    }
    ratio = client_side["append_arrow_rows_s"] / client_side["pylist_append_batch_rows_s"]
    print(f"\n{n:,} rows x 100 B, 3 nodes R=2, medians of {args.repeat} runs\n")
    print("| path | rows/s |\n|---|---:|")
    print(f"| Spark sink, local[2] | {result['spark_sink_rows_s']:,.0f} |")
    print(f"| one client, append_arrow | {client_side['append_arrow_rows_s']:,.0f} |")
    print(
        f"| one client, to_pylist + append_batch | "
        f"{client_side['pylist_append_batch_rows_s']:,.0f} |"
    )
    print(f"\nappend_arrow / (to_pylist + append_batch): {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

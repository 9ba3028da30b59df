"""Append throughput and latency on a local 3-node cluster (R=2 by default).

    python bench/append.py [--records 100000] [--repeat 3] [--replication 2] [--json out.json]
                           [--node-arg=--receive-budget --node-arg=1GiB ...]

Cases (each run --repeat times, medians printed):
- one appender, batching: ``append_batch`` calls of 1000 records (100 B) or
  100 records (10 KiB), one after the other;
- 16 concurrent appenders: 16 trio tasks each calling ``append`` in a loop;
  the client coalesces their records into few APPENDs;
- sequential latency: one ``append`` at a time, p50/p99 over 5000 appends.

The cluster runs as real node processes on 127.0.0.1 (``LocalCluster``); the
client is one trio process.  This machine has 2 cores for all of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from typing import Any

import trio

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


async def one_appender(client: logstrand.AsyncClient, log: int, n: int, size: int) -> float:
    batch = 1000 if size <= 1024 else 100
    payloads = [b"x" * size] * batch
    t0 = time.perf_counter()
    for _ in range(n // batch):
        await client.append_batch(log, payloads)
    return (n // batch) * batch / (time.perf_counter() - t0)


async def concurrent_appenders(
    client: logstrand.AsyncClient, log: int, n: int, size: int, tasks: int = 16
) -> float:
    payload = b"y" * size
    each = n // tasks

    async def worker() -> None:
        for _ in range(each):
            await client.append(log, payload)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(worker)
    return each * tasks / (time.perf_counter() - t0)


async def latency(client: logstrand.AsyncClient, log: int, n: int) -> tuple[float, float]:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        await client.append(log, b"z" * 100)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


async def run_all(url: str, records: int, repeat: int) -> dict[str, Any]:
    results: dict[str, list[Any]] = {}
    async with logstrand.open_client(url) as client:
        await client.append(1, b"warm-up")
        for _ in range(repeat):
            for size, n in ((100, records), (10 * 1024, max(1000, records // 20))):
                results.setdefault(f"batch_{size}", []).append(
                    await one_appender(client, 1, n, size)
                )
                results.setdefault(f"concurrent16_{size}", []).append(
                    await concurrent_appenders(client, 1, n // 2, size)
                )
            results.setdefault("latency", []).append(await latency(client, 1, 5000))
    out: dict[str, Any] = {}
    for name, runs in results.items():
        if name == "latency":
            out["latency_p50_ms"] = statistics.median(r[0] for r in runs)
            out["latency_p99_ms"] = statistics.median(r[1] for r in runs)
        else:
            out[name] = statistics.median(runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--replication", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--node-arg",
        action="append",
        default=[],
        help="An option for every node, e.g. --node-arg=--receive-budget --node-arg=1GiB",
    )
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-bench-") as d,
        LocalCluster(d, nodes=3, node_args=tuple(args.node_arg)) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=args.replication))
        res = trio.run(run_all, cluster.url, args.records, args.repeat)
    res["replication"] = args.replication
    res["node_args"] = args.node_arg
    print(f"3 nodes, R={args.replication}, median of {args.repeat} runs")
    print("| case | records/s | MB/s |")
    print("|---|---|---|")
    for key, label, size in (
        ("batch_100", "one appender, append_batch, 100 B", 100),
        ("concurrent16_100", "16 concurrent appenders, 100 B", 100),
        ("batch_10240", "one appender, append_batch, 10 KiB", 10240),
        ("concurrent16_10240", "16 concurrent appenders, 10 KiB", 10240),
    ):
        print(f"| {label} | {res[key]:,.0f} | {res[key] * size / 1e6:,.1f} |")
    print(
        f"| sequential append latency | p50 {res['latency_p50_ms']:.2f} ms | "
        f"p99 {res['latency_p99_ms']:.2f} ms |"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

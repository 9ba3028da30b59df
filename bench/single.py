"""One record at a time: the producer's buffer against threads and loops.

    .venv/bin/python bench/single.py [--repeat 3] [--records 50000]

On a fresh local 3-node cluster (R=2, 100 B records), medians of --repeat runs:

- one thread, N x ``append_async``, then wait for every future;
- 16 and 64 threads, each ``append`` in a loop, to one log;
- one thread, sequential ``append``: p50 and p99.

Redis Streams' figures for the same cases come from ``shared/bench/peers.py``
(pipelined XADD, XADD loops); this script measures logstrand only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

PAYLOAD = b"x" * 100


def async_burst(client: logstrand.Client, n: int) -> float:
    t0 = time.perf_counter()
    futures = [client.append_async(1, PAYLOAD) for _ in range(n)]
    for f in futures:
        f.result(120)
    return n / (time.perf_counter() - t0)


def threads(client: logstrand.Client, count: int, per: int) -> float:
    def work() -> None:
        for _ in range(per):
            client.append(2, PAYLOAD)

    ts = [threading.Thread(target=work) for _ in range(count)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return count * per / (time.perf_counter() - t0)


def sequential(client: logstrand.Client, n: int) -> tuple[float, float]:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.append(3, PAYLOAD)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


def one_run(records: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d, LocalCluster(f"{d}/c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            client.append(1, b"warm")
            p50, p99 = sequential(client, 2000)
            return {
                "append_async": async_burst(client, records),
                "threads16": threads(client, 16, 300),
                "threads64": threads(client, 64, 150),
                "p50_ms": p50,
                "p99_ms": p99,
            }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=50_000)
    args = ap.parse_args()
    runs = [one_run(args.records) for _ in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"3 nodes, R=2, 100 B, median of {args.repeat} runs")
    print("| case | logstrand |")
    print("|---|---|")
    print(f"| one thread, {args.records:,} x append_async, then wait | "
          f"{med['append_async']:,.0f} rec/s |")  # fmt: skip
    print(f"| 16 threads, each append in a loop | {med['threads16']:,.0f} rec/s |")
    print(f"| 64 threads, each append in a loop | {med['threads64']:,.0f} rec/s |")
    print(f"| sequential append | p50 {med['p50_ms']:.2f} ms, p99 {med['p99_ms']:.2f} ms |")


if __name__ == "__main__":
    main()

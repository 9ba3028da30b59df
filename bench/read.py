"""Backfill throughput and tail latency on a local 3-node cluster (R=2).

    python bench/read.py [--records 1000000] [--repeat 3] [--json out.json]
                         [--batch 1000] [--keyed] [--only first]

- backfill: append N x 100 B (in batches of ``--batch``, with one of 1,000
  keys each when ``--keyed``) and N/10 x 10 KiB records, then read
  each log back from the start to the tail, single-copy delivery, in columns
  (``ReadStream.batches()``) and as ``Record`` objects; records/s and MB/s;
- tail: one task appends 100 B records one at a time at 1,000/s (each
  acknowledged before the next), another follows the log; the time from an
  append's acknowledgement to the record's delivery, p50/p99 (negative when the
  record is delivered before the acknowledgement reaches the appender);
- first record: a reader follows a log that has never had a record; one record
  is appended; the time from ``append()`` returning to its delivery.  Then the
  log stays quiet for 3 s and one more record is appended: the same time again.
  Medians over ``--first-logs`` fresh logs (``--only first`` runs just this).

Both run in one client process against real node processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

import trio

import logstrand
from logstrand.client import RecordRun
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


async def fill(
    client: logstrand.AsyncClient,
    log: int,
    n: int,
    size: int,
    batch: int = 1000,
    keyed: bool = False,
) -> None:
    batch = batch if size <= 1024 else 100
    payloads = [b"x" * size] * batch
    keys = [b"key-%d" % (i % 1000) for i in range(batch)] if keyed else None
    for _ in range(n // batch):
        await client.append_batch(log, payloads, keys=keys)


async def backfill(client: logstrand.AsyncClient, log: int, objects: bool) -> tuple[int, float]:
    t0 = time.perf_counter()
    count = 0
    async with client.read(log) as reader:
        if objects:
            async for item in reader:
                count += isinstance(item, logstrand.Record)
        else:
            async for items in reader.batches():
                count += sum(len(i.lsns) for i in items if isinstance(i, RecordRun))
    return count, time.perf_counter() - t0


async def tail(client: logstrand.AsyncClient, log: int, n: int, rate: float) -> list[float]:
    acked: dict[int, float] = {}
    delivered: dict[int, float] = {}
    await client.append(log, b"start")

    async def follow() -> None:
        async with client.read(log, until=None) as reader:
            async for item in reader:
                if isinstance(item, logstrand.Record) and item.payload == b"t" * 100:
                    delivered[item.lsn] = time.perf_counter()
                    if len(delivered) >= n:
                        return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.sleep(0.5)
        start = time.perf_counter()
        for i in range(n):
            lsn = await client.append(log, b"t" * 100)
            acked[lsn] = time.perf_counter()
            await trio.sleep(max(0.0, start + (i + 1) / rate - time.perf_counter()))
    return sorted(delivered[lsn] - acked[lsn] for lsn in acked if lsn in delivered)


async def first_records(
    client: logstrand.AsyncClient, log: int, quiet_s: float
) -> tuple[float, float]:
    """Seconds from ``append()`` returning to delivery: the first record of a
    log its reader started on before it had any, then one after ``quiet_s``."""
    delivered: dict[bytes, float] = {}
    got = trio.Event()

    async def follow() -> None:
        nonlocal got
        async with client.read(log, until=None) as reader:
            async for item in reader:
                if isinstance(item, logstrand.Record) and item.payload:
                    delivered[item.payload] = time.perf_counter()
                    got.set()
                    if len(delivered) == 2:
                        return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.sleep(0.5)  # the reader is open and waiting
        await client.append(log, b"first")
        acked_first = time.perf_counter()
        with trio.fail_after(30):
            await got.wait()
        got = trio.Event()
        await trio.sleep(quiet_s)
        await client.append(log, b"after quiet")
        acked_quiet = time.perf_counter()
    return delivered[b"first"] - acked_first, delivered[b"after quiet"] - acked_quiet


async def run_first(url: str, logs: range, quiet_s: float = 3.0) -> dict[str, Any]:
    firsts, quiets = [], []
    async with logstrand.open_client(url) as client:
        for log in logs:
            a, b = await first_records(client, log, quiet_s)
            firsts.append(a * 1000)
            quiets.append(b * 1000)
    return {
        "first_record_ms": statistics.median(firsts),
        "first_record_max_ms": max(firsts),
        "after_quiet_ms": statistics.median(quiets),
        "after_quiet_max_ms": max(quiets),
    }


async def run_all(url: str, records: int, repeat: int, batch: int, keyed: bool) -> dict[str, Any]:
    out: dict[str, list[float]] = {}
    async with logstrand.open_client(url) as client:
        for r in range(repeat):
            small, large = 10 + r * 3, 11 + r * 3
            await fill(client, small, records, 100, batch, keyed)
            await fill(client, large, records // 10, 10 * 1024)
            for log, size in ((small, 100), (large, 10 * 1024)):
                for objects in (False, True):
                    n, secs = await backfill(client, log, objects)
                    key = f"backfill_{size}_{'objects' if objects else 'columns'}"
                    out.setdefault(key, []).append(n / secs)
            lat = await tail(client, 12 + r * 3, 2000, 1000.0)
            out.setdefault("tail_p50_ms", []).append(lat[len(lat) // 2] * 1000)
            out.setdefault("tail_p99_ms", []).append(lat[int(len(lat) * 0.99)] * 1000)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--batch", type=int, default=1000, help="records per append of 100 B")
    ap.add_argument("--keyed", action="store_true", help="100 B records with keys")
    ap.add_argument(
        "--first-logs", type=int, default=10, help="fresh logs for the first-record case"
    )
    ap.add_argument("--only", choices=("first",), help="run only this case")
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-bench-") as d,
        LocalCluster(d, nodes=3) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1000, LogAttributes(replication_factor=2))
        res = {}
        if args.only is None:
            res = trio.run(run_all, cluster.url, args.records, args.repeat, args.batch, args.keyed)
        res |= trio.run(run_first, cluster.url, range(900, 900 + args.first_logs))
    print(
        f"first record of a new log, append() returning -> delivery: median "
        f"{res['first_record_ms']:.2f} ms (max {res['first_record_max_ms']:.2f}); after 3 s "
        f"quiet: median {res['after_quiet_ms']:.2f} ms (max {res['after_quiet_max_ms']:.2f}), "
        f"{args.first_logs} logs"
    )
    if args.only is not None:
        return
    keyed = ", keyed" if args.keyed else ""
    print(
        f"3 nodes, R=2, single-copy delivery, 100 B appended {args.batch} a batch{keyed}, "
        f"median of {args.repeat} runs"
    )
    print("| case | records/s | MB/s |")
    print("|---|---|---|")
    for size, label in ((100, "100 B"), (10 * 1024, "10 KiB")):
        for kind in ("columns", "objects"):
            v = res[f"backfill_{size}_{kind}"]
            print(f"| backfill {label}, {kind} | {v:,.0f} | {v * size / 1e6:,.1f} |")
    print(
        f"| tail 100 B @1000/s, ack -> delivery | p50 {res['tail_p50_ms']:.2f} ms | "
        f"p99 {res['tail_p99_ms']:.2f} ms |"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()

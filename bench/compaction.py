"""Compaction: records cleaned per second, and the offset map's bytes per key.

    python bench/compaction.py [--records 1000000] [--keys 100000] [--repeat 3]
                               [--json bench/results/compaction.json]

1. The offset map on its own, in this process: ``--keys`` distinct keys put in
   batches of 4,096 (as a pass does), against a plain Python dict holding the
   same map (16-byte key hash → LSN); memory per key of each (the dict's
   measured with tracemalloc), and puts per second.
2. A pass on a local 3-node cluster (R=2): ``--records`` records of 100 B over
   ``--keys`` keys, then ``client.compact`` (read the dirty section once, build
   the map, every node drops its superseded copies), ``--repeat`` times on fresh
   logs; records cleaned per second = records in the dirty section / pass time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import trio

from logstrand.client import open_client
from logstrand.compaction import OffsetMap, hash_keys
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

BATCH = 4096


def _keys(n: int) -> list[bytes]:
    return [b"user-%09d" % i for i in range(n)]


def map_bench(keys: int) -> dict[str, Any]:
    ks = _keys(keys)
    hashes = hash_keys(ks)
    lsns = np.arange(1, keys + 1, dtype=np.uint64)
    m = OffsetMap(int(keys / 0.9 + 2) * 24)
    t0 = time.perf_counter()
    for i in range(0, keys, BATCH):
        m.put_many(hashes[i : i + BATCH], lsns[i : i + BATCH])
    ours_s = time.perf_counter() - t0
    assert m.size == keys
    raw = [hashes[i].tobytes() for i in range(keys)]
    tracemalloc.start()
    t0 = time.perf_counter()
    d: dict[bytes, int] = {}
    for i, h in enumerate(raw):
        d[h] = i + 1
    dict_s = time.perf_counter() - t0
    dict_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # The dict's keys already existed as bytes objects (the hashes): count them too.
    key_objects = sum(sys.getsizeof(h) for h in raw[:1000]) / 1000 * keys
    return {
        "keys": keys,
        "map_bytes": m.nbytes,
        "map_bytes_per_key": m.nbytes / keys,
        "map_puts_s": keys / ours_s,
        "dict_bytes_per_key": (dict_bytes + key_objects) / keys,
        "dict_puts_s": keys / dict_s,
    }


async def _fill(url: str, log: int, n: int, keys: int) -> None:
    pad = b"." * 90
    async with open_client(url) as client:
        sem = trio.Semaphore(4)

        async def one(lo: int) -> None:
            async with sem:
                hi = min(n, lo + 10_000)
                await client.append_batch(
                    log,
                    [b"%010d" % i + pad for i in range(lo, hi)],
                    keys=[b"user-%09d" % (i % keys) for i in range(lo, hi)],
                )

        async with trio.open_nursery() as nursery:
            for lo in range(0, n, 10_000):
                nursery.start_soon(one, lo)


async def _compact(url: str, log: int) -> dict[str, Any]:
    async with open_client(url) as client:
        return await client.compact(log)


def pass_bench(records: int, keys: int, repeat: int) -> list[dict[str, Any]]:
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-compaction-") as tmp,
        LocalCluster(Path(tmp) / "c", nodes=3, node_args=("--compaction-interval", "0")) as c,
    ):
        with open_epoch_store(c.url) as store:
            store.create_logs(
                1, repeat, LogAttributes(replication_factor=2, cleanup_policy="compact")
            )
        for log in range(1, repeat + 1):
            trio.run(_fill, c.url, log, records, keys)
            t0 = time.perf_counter()
            stats = trio.run(_compact, c.url, log)
            wall = time.perf_counter() - t0
            runs.append({**stats, "wall_s": wall, "records_s": stats["records_read"] / wall})
            print(
                f"pass {log}: {stats['records_read']:,} read, {stats['records_removed']:,} "
                f"removed, {wall:.2f}s",
                file=sys.stderr,
            )
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    maps = [map_bench(args.keys) for _ in range(args.repeat)]
    runs = pass_bench(args.records, args.keys, args.repeat)

    def med(rows: list[dict[str, Any]], k: str) -> float:
        return float(statistics.median(r[k] for r in rows))

    print(f"\n{args.records:,} records of 100 B over {args.keys:,} keys, 3 nodes R=2;")
    print(f"medians of {args.repeat} runs\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| pass: records cleaned / s | {med(runs, 'records_s'):,.0f} |")
    print(f"| pass: wall time, s | {med(runs, 'wall_s'):.2f} |")
    print(f"| pass: records removed | {med(runs, 'records_removed'):,.0f} |")
    print(f"| offset map: bytes / key | {med(maps, 'map_bytes_per_key'):.1f} |")
    print(f"| Python dict, same map: bytes / key | {med(maps, 'dict_bytes_per_key'):.1f} |")
    ratio = med(maps, "dict_bytes_per_key") / med(maps, "map_bytes_per_key")
    print(f"| dict / offset map, memory | {ratio:.1f}x |")
    print(f"| offset map: puts / s (batches of {BATCH}) | {med(maps, 'map_puts_s'):,.0f} |")
    print(f"| Python dict: puts / s | {med(maps, 'dict_puts_s'):,.0f} |")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": None}, "maps": maps, "passes": runs}, indent=2
            )
        )


if __name__ == "__main__":
    main()

"""LogsDB with RocksDB blob files (BlobDB) against the plain LSM, for large records.

    python bench/blobs.py [--records 60000] [--size 10240] [--repeat 3] [--json out.json]

Each run writes ``--records`` records of ``--size`` bytes to a fresh LogsDB in
batches of 1,000 (one RocksDB write each, sync off, as a node's group commit),
several times the memtable, so that flushes and compactions happen during the
run; then flushes, reads everything back in order (as a read stream does, in
chunks), and measures the directory.  ``plain`` keeps values in the LSM;
``blobs`` sends values of at least ``--blob-min`` bytes to blob files.  The
two alternate, ``--repeat`` times; the table shows medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from logstrand.batch import make_batch
from logstrand.logsdb import LogsDB, LogsDBOptions, PutBatch

BATCH = 1000


def one_run(n: int, size: int, blob_min: int | None) -> dict[str, float]:
    d = tempfile.mkdtemp(prefix="logstrand-blobs-")
    try:
        db = LogsDB.open(d, LogsDBOptions(blob_min_bytes=blob_min))
        # Incompressible payloads, as most large records are (or are already
        # compressed): RocksDB would squeeze a repeated byte to nothing.
        payloads = [os.urandom(size) for _ in range(BATCH)]
        now = int(time.time() * 1000)
        batches = [
            make_batch(range(s, s + BATCH), payloads, timestamps_ms=now)
            for s in range(1, n + 1, BATCH)
        ]
        t0 = time.perf_counter()
        for rb in batches:
            db.write([PutBatch.of(7, rb, (1, 2))], sync=False)
        write_s = time.perf_counter() - t0
        db.flush()
        t0 = time.perf_counter()
        count, start = 0, 1
        while True:
            got = db.read_batch(7, start, max_records=BATCH, max_bytes=1 << 30)
            if not got:
                break
            count += len(got)
            start = got.lsns[-1] + 1
        read_s = time.perf_counter() - t0
        assert count == n, count
        disk = db.disk_bytes()
        db.close()
        return {"write_rps": n / write_s, "read_rps": n / read_s, "disk_mb": disk / 1e6}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--size", type=int, default=10_240)
    ap.add_argument("--blob-min", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    cases: dict[str, int | None] = {"plain": None, "blobs": args.blob_min}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in cases}
    for _ in range(args.repeat):
        for name, blob_min in cases.items():
            runs[name].append(one_run(args.records, args.size, blob_min))
    mb = args.records * args.size / 1e6
    print(f"{args.records} records x {args.size} B ({mb:.0f} MB), medians of {args.repeat}")
    print("| LogsDB | write rec/s | write MB/s | read rec/s | read MB/s | disk MB | runs (write) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    summary: dict[str, Any] = {}
    for name, results in runs.items():
        w = statistics.median(r["write_rps"] for r in results)
        r = statistics.median(r["read_rps"] for r in results)
        disk = statistics.median(r["disk_mb"] for r in results)
        spread = ", ".join(f"{x['write_rps']:,.0f}" for x in results)
        size_mb = args.size / 1e6
        print(
            f"| {name} | {w:,.0f} | {w * size_mb:.0f} | {r:,.0f} | {r * size_mb:.0f} "
            f"| {disk:.0f} | {spread} |"
        )
        summary[name] = {"write_rps": w, "read_rps": r, "disk_mb": disk, "runs": results}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": summary}, fh, indent=1)


if __name__ == "__main__":
    main()

"""LogsDB write and read throughput, side by side with raw rocksdict.

Each case writes N records of one size in batches of 1000 (one RocksDB write
per batch), with sync off or on, then reads them all back in order.  The
baseline does the same with bare rocksdict: the same keys, a value of the same
size, one WriteBatch per 1000 records, and ``items()`` to read.  Both run in
this process, alternating, ``--repeat`` times; the table shows medians and the
LogsDB/raw ratio.

    python bench/logsdb.py [--records 200000] [--repeat 3] [--json out.json]
    python bench/logsdb.py --amplification 2 [--repeat 3]
    python bench/logsdb.py --big [--repeat 3]
    python bench/logsdb.py --wal [--repeat 3]

``--amplification GIB`` measures instead what a steady append load costs
the disk: GIB of 1 KiB records (random bytes: compression does not hide
what is rewritten) over 100 logs, batches of 1000 records of one log in
turn, as a node stores them; then it waits for RocksDB's background work
to end and reports, from RocksDB's statistics (``LogsDB.io_bytes``), the
write amplification (bytes written to SST and blob files by flushes and
compactions, over bytes of records written) and the WAL's bytes apart.

``--big`` reads 200 MB of 10 KiB records in batches of 100 (1 MiB values,
in blob files) as read streams do (``read_packed``, 4 MiB a step), again
with RocksDB's read-time checksums on (``RocksEngine.verify_reads``, off in
a node), and as bare rocksdict iterates the same column families with its
default read options (checksums verified): the rate of each, in the same
process, alternating.

``--wal`` writes 200 values of 1 MiB (one WriteBatch each, sync off) to bare
rocksdict with its write-ahead log on and off: what RocksDB's WAL costs a
node's write of big batches (ms per MiB, medians).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import TYPE_CHECKING, Any

import rocksdict

from logstrand.batch import make_batch
from logstrand.logsdb import LogsDB, LogsDBOptions, PutBatch
from logstrand.logsdb._engine import RocksEngine

if TYPE_CHECKING:
    from collections.abc import Callable

BATCH = 1000


def _raw(path: str, n: int, size: int, sync: bool) -> tuple[float, float]:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(64 * 1024 * 1024)
    db = rocksdict.Rdict(path, opts)
    cf = db.create_column_family("p", rocksdict.Options(raw_mode=True))
    handle = db.get_column_family_handle("p")
    wo = rocksdict.WriteOptions()
    wo.sync = sync
    # Same value size as LogsDB's: 23-byte header + 8-byte copyset + payload.
    value = b"v" * (size + 27)
    prefix = (7).to_bytes(8, "big")
    t0 = time.perf_counter()
    for start in range(1, n + 1, BATCH):
        wb = rocksdict.WriteBatch(raw_mode=True)
        for lsn in range(start, start + BATCH):
            wb.put(prefix + lsn.to_bytes(8, "big"), value, handle)
        db.write(wb, wo)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # Read as LogsDB does: chunks of BATCH records, each a bounded iterator
    # from a seek, keeping what is read (iterating and dropping each value at
    # once would measure the allocator's free list, not a read).
    count = 0
    for start in range(1, n + 1, BATCH):
        ro = rocksdict.ReadOptions()
        ro.set_iterate_upper_bound(prefix + (start + BATCH).to_bytes(8, "big"))
        kept = list(cf.items(from_key=prefix + start.to_bytes(8, "big"), read_opt=ro))
        count += len(kept)
    read_s = time.perf_counter() - t0
    assert count == n
    del cf, kept, ro
    db.close()
    return write_s, read_s


def _logsdb(path: str, n: int, size: int, sync: bool) -> tuple[float, float]:
    db = LogsDB.open(path)
    payload = b"p" * size
    now = int(time.time() * 1000)
    payloads = [payload] * BATCH
    batches = [
        make_batch(range(s, s + BATCH), payloads, timestamps_ms=now) for s in range(1, n + 1, BATCH)
    ]
    t0 = time.perf_counter()
    for rb in batches:
        db.write([PutBatch.of(7, rb, (1, 2))], sync=sync)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    count = 0
    start = 1
    while True:
        got = db.read_batch(7, start, max_records=BATCH, max_bytes=1 << 30)
        if not got:
            break
        count += len(got)
        start = got.lsns[-1] + 1
    read_s = time.perf_counter() - t0
    assert count == n, count
    db.close()
    return write_s, read_s


def amplification(gib: float, options: LogsDBOptions) -> dict[str, Any]:
    """One run of ``--amplification`` (see the module docstring)."""
    pool = os.urandom(2 << 20)
    d = tempfile.mkdtemp(prefix="logstrand-bench-")
    try:
        db = LogsDB.open(d, options)
        now = int(time.time() * 1000)
        batches = int(gib * (1 << 30) / (BATCH * 1024))
        next_lsn = dict.fromkeys(range(1, 101), 1)
        t0 = time.perf_counter()
        for i in range(batches):
            log = 1 + i % 100
            at = (i * 7919) % (1 << 20)
            payloads = [pool[at + j * 1024 : at + (j + 1) * 1024] for j in range(BATCH)]
            first = next_lsn[log]
            rb = make_batch(range(first, first + BATCH), payloads, timestamps_ms=now)
            db.write([PutBatch.of(log, rb, (1, 2))], sync=False)
            next_lsn[log] = first + BATCH
        db.flush()
        write_s = time.perf_counter() - t0
        while db.background_work():
            time.sleep(0.2)
        settle_s = time.perf_counter() - t0 - write_s
        io = db.io_bytes()
        parts = db.partitions()
        # Then one log read back whole, as a backfill reads it.
        t1 = time.perf_counter()
        count, start = 0, 1
        while got := db.read_batch(1, start, max_records=BATCH, max_bytes=1 << 30):
            count += len(got)
            start = got.lsns[-1] + 1
        read_s = time.perf_counter() - t1
        assert count == next_lsn[1] - 1, count
        files = db.sst_files()
        db.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {
        "gib": gib,
        "blob_min_bytes": options.blob_min_bytes,
        "write_mb_s": round(batches * BATCH * 1024 / write_s / 1e6, 1),
        "settle_s": round(settle_s, 1),
        "read_one_log_mb_s": round(count * 1024 / read_s / 1e6, 1),
        "sst_files": files,
        "user_gb": round(io.user / 1e9, 3),
        "wal_gb": round(io.wal / 1e9, 3),
        "flush_gb": round(io.flush / 1e9, 3),
        "compaction_gb": round(io.compaction / 1e9, 3),
        "of_which_blob_gb": round(io.blob / 1e9, 3),
        "amplification": round(io.amplification, 3),
        "partitions": len(parts),
    }


def big(repeat: int) -> dict[str, float]:
    """``--big`` (see the module docstring): MB/s of each reader."""
    d = tempfile.mkdtemp(prefix="logstrand-bench-")
    try:
        db = LogsDB.open(d)
        now = int(time.time() * 1000)
        payloads = [b"y" * 10240] * 100
        for i in range(200):
            first = 1 + 100 * i
            batch = make_batch(range(first, first + 100), payloads, timestamps_ms=now)
            db.write([PutBatch.of(7, batch, (1, 2))], sync=False)
        db.flush()
        total = 200 * 100 * 10240 / 1e6
        engine = db._engine  # the same column families, read bare
        assert isinstance(engine, RocksEngine)
        got: dict[str, list[float]] = {
            "read_packed_mb_s": [],
            "read_packed_rocksdb_checks_mb_s": [],
            "rocksdict_mb_s": [],
        }

        def ours() -> None:
            start = 1
            while (got := db.read_packed(7, start, max_records=8192, max_bytes=4 << 20)).batches:
                start = got.scanned_to + 1

        def bare() -> None:
            for cf in engine.column_families():
                for _ in engine._cfs[cf].items():
                    pass

        for _ in range(repeat):
            for name, read, checks in (
                ("read_packed_mb_s", ours, False),
                ("read_packed_rocksdb_checks_mb_s", ours, True),
                ("rocksdict_mb_s", bare, True),
            ):
                engine.verify_reads = checks
                t0 = time.perf_counter()
                read()
                got[name].append(total / (time.perf_counter() - t0))
        db.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {k: statistics.median(v) for k, v in got.items()}


def wal(repeat: int) -> dict[str, float]:
    """``--wal`` (see the module docstring): ms per MiB with and without."""
    d = tempfile.mkdtemp(prefix="logstrand-bench-")
    try:
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        db = rocksdict.Rdict(d, opts)
        value = os.urandom(1 << 20)
        got: dict[str, list[float]] = {"wal_ms_per_mib": [], "no_wal_ms_per_mib": []}
        for i in range(repeat):
            for name, off in (("wal_ms_per_mib", False), ("no_wal_ms_per_mib", True)):
                wo = rocksdict.WriteOptions()
                # A property at run time; rocksdict's stub calls it a method.
                setattr(wo, "disable_wal", off)  # noqa: B010
                times = []
                for k in range(200):
                    wb = rocksdict.WriteBatch(raw_mode=True)
                    wb.put(b"%s-%d-%d" % (name.encode(), i, k), value)
                    t0 = time.perf_counter()
                    db.write(wb, wo)
                    times.append((time.perf_counter() - t0) * 1000)
                got[name].append(statistics.median(times))
        db.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return {k: statistics.median(v) for k, v in got.items()}


def run(records: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for size in (100, 1024):
        for sync in (False, True):
            n = records if size == 100 else records // 2
            results: dict[str, list[tuple[float, float]]] = {"raw": [], "logsdb": []}
            runners: dict[str, Callable[[str, int, int, bool], tuple[float, float]]] = {
                "raw": _raw,
                "logsdb": _logsdb,
            }
            for _ in range(repeat):
                for name, fn in runners.items():
                    d = tempfile.mkdtemp(prefix="logstrand-bench-")
                    try:
                        results[name].append(fn(d, n, size, sync))
                    finally:
                        shutil.rmtree(d, ignore_errors=True)
            row: dict[str, Any] = {"size": size, "sync": sync, "records": n}
            for name, runs in results.items():
                w = statistics.median(n / r[0] for r in runs)
                r = statistics.median(n / r[1] for r in runs)
                row[f"{name}_write_rps"] = w
                row[f"{name}_read_rps"] = r
            row["write_ratio"] = row["logsdb_write_rps"] / row["raw_write_rps"]
            row["read_ratio"] = row["logsdb_read_rps"] / row["raw_read_rps"]
            rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        "| payload | sync | records | LogsDB write rec/s (MB/s) | raw write rec/s | ratio "
        "| LogsDB read rec/s (MB/s) | raw read rec/s | ratio |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        mb = r["size"] / 1e6
        lines.append(
            f"| {r['size']} B | {'on' if r['sync'] else 'off'} | {r['records']} "
            f"| {r['logsdb_write_rps']:,.0f} ({r['logsdb_write_rps'] * mb:.0f}) "
            f"| {r['raw_write_rps']:,.0f} | {r['write_ratio']:.2f} "
            f"| {r['logsdb_read_rps']:,.0f} ({r['logsdb_read_rps'] * mb:.0f}) "
            f"| {r['raw_read_rps']:,.0f} | {r['read_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write every number here")
    ap.add_argument("--amplification", type=float, default=None, metavar="GIB")
    ap.add_argument(
        "--blob-min",
        type=int,
        default=-1,
        help="LogsDBOptions.blob_min_bytes for --amplification (0: no blob files; "
        "default: LogsDB's default)",
    )
    ap.add_argument("--big", action="store_true", help="read 1 MiB batches (see above)")
    ap.add_argument("--wal", action="store_true", help="RocksDB's WAL on 1 MiB writes")
    args = ap.parse_args()
    if args.wal:
        print(json.dumps({k: round(v, 2) for k, v in wal(args.repeat).items()}))
        return
    if args.big:
        got = big(args.repeat)
        print(json.dumps({k: round(v) for k, v in got.items()}))
        return
    if args.amplification is not None:
        options = LogsDBOptions()
        if args.blob_min >= 0:
            options = LogsDBOptions(blob_min_bytes=args.blob_min or None)
        runs = [amplification(args.amplification, options) for _ in range(args.repeat)]
        for r in runs:
            print(json.dumps(r))
        median = statistics.median(r["amplification"] for r in runs)
        print(f"write amplification, median of {args.repeat}: {median:.3f}")
        return
    rows = run(args.records, args.repeat)
    print(f"LogsDB vs raw rocksdict, batches of {BATCH}, median of {args.repeat} runs")
    print(render(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()

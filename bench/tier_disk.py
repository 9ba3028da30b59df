"""What a tiered log leaves on the nodes' disks (docs/tiered-storage.md): a
fresh 3-node cluster (R=2) tiering to moto's S3 server on 127.0.0.1, one
log with ``--tier-after 2s --local-retention SIZE``, ``--gigabytes`` of 10
KiB records appended; then the nodes' LogsDB sizes (``logstrand_disk_
bytes``) once the offload has caught up and the local drop has run, against
the local retention and against the bytes the log's copies would take
without it (R copies of every byte, over three nodes).

    .venv/bin/python bench/tier_disk.py --gigabytes 1 --local-retention 100MiB --repeat 3

Each run is a fresh cluster; the medians are of the largest node's size
over the local retention, and of the offload's time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import logstrand
from logstrand._units import parse_size
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, MotoServer
from logstrand.testing._moto import CREDENTIALS

SIZE = 10 * 1024
PER_APPEND = 100
LOG = 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--local-retention", default="100MiB")
    parser.add_argument("--settle", type=float, default=120.0, help="seconds to wait at most")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        runs.append(one_run(args.gigabytes, parse_size(args.local_retention), args.settle))
        print(json.dumps(runs[-1], indent=2), flush=True)
    result = {
        "medians": {
            k: statistics.median(float(r[k]) for r in runs)  # type: ignore[arg-type]
            for k in ("largest_node_over_local_retention", "offload_s")
        },
        "runs": runs,
    }
    print(json.dumps(result["medians"], indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


def one_run(gigabytes: float, keep: int, settle_s: float) -> dict[str, object]:
    total = int(gigabytes * 1e9)
    with tempfile.TemporaryDirectory() as tmp, MotoServer(tmp) as moto:
        moto.create_bucket("disk")
        creds = Path(tmp) / "creds"
        creds.write_text("".join(f"{k}={v}\n" for k, v in CREDENTIALS.items()))
        node_args = ("--tier-url", "s3://disk/b", "--tier-endpoint", moto.endpoint,
                     "--tier-credentials", str(creds), "--tier-interval", "0.5",
                     "--partition-duration", "2s", "--maintenance-interval", "1")  # fmt: skip
        with LocalCluster(Path(tmp) / "c", nodes=3, node_args=node_args) as c:
            with open_epoch_store(c.url) as store:
                store.create_logs(
                    LOG,
                    LOG,
                    LogAttributes(
                        replication_factor=2, tier_after_ms=2000, local_retention_bytes=keep
                    ),
                )
            t0 = time.perf_counter()
            with logstrand.connect(c.url) as client:
                written = 0
                payloads = [b"x" * SIZE] * PER_APPEND
                while written < total:
                    client.append_batch(LOG, payloads)
                    written += SIZE * PER_APPEND
                last = client.tail_lsn(LOG)
            append_s = time.perf_counter() - t0

            def disk() -> dict[int, float]:
                return {n: c.metric(n, "logstrand_disk_bytes", 0.0) for n in (1, 2, 3)}

            peak = disk()
            deadline = time.monotonic() + settle_s
            with open_epoch_store(c.url) as store:
                while store.tier_points([LOG])[LOG] < last and time.monotonic() < deadline:
                    time.sleep(0.5)
                tiered = store.tier_points([LOG])[LOG] >= last
            offload_s = time.perf_counter() - t0
            # The drop follows the maintenance passes: until the sizes stop falling.
            sizes, before = disk(), None
            while sizes != before and time.monotonic() < deadline:
                before = sizes
                time.sleep(5)
                sizes = disk()
            breakdown = _breakdown(c)
    without = written * 2 / 3  # R=2 copies over three nodes, per node
    result: dict[str, object] = {
        "written_MB": round(written / 1e6, 1),
        "local_retention_MB": round(keep / 1e6, 1),
        "append_s": round(append_s, 1),
        "tiered_all": tiered,
        "offload_s": round(offload_s, 1),
        "disk_MB_at_end_of_appends": {n: round(v / 1e6, 1) for n, v in peak.items()},
        "disk_MB_after_drop": {n: round(v / 1e6, 1) for n, v in sizes.items()},
        "disk_MB_without_local_retention_per_node": round(without / 1e6, 1),
        "largest_node_over_local_retention": round(max(sizes.values()) / keep, 2),
        "where_the_bytes_are": breakdown,
    }
    return result


def _breakdown(c: LocalCluster) -> dict[int, dict[str, object]]:
    """Per node: the log's bytes in each partition it keeps (oldest first),
    and its data directory's bytes by kind of file (``.blob``: record
    values, ``.sst``, ``.log``: RocksDB's WAL)."""
    with logstrand.connect(c.url) as client:
        segments = client.log_directory(LOG)
    out: dict[int, dict[str, object]] = {}
    for n in (1, 2, 3):
        files: dict[str, float] = {}
        for root, _, names in os.walk(c.nodes[n].data_dir):
            for name in names:
                kind = os.path.splitext(name)[1] or "other"
                size = os.path.getsize(os.path.join(root, name))
                files[kind] = files.get(kind, 0.0) + size / 1e6
        out[n] = {
            "log_MB_per_partition": [round(s.bytes / 1e6, 1) for s in segments if s.node_id == n],
            "files_MB": {k: round(v, 1) for k, v in sorted(files.items()) if v >= 0.1},
        }
    return out


if __name__ == "__main__":
    main()

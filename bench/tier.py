"""Tiered storage against its aims (docs/tiered-storage.md), on a fresh 3-node
cluster (R=2) whose nodes tier to moto's S3 server on 127.0.0.1.

* **offload**: records of 10 KiB appended to a tiered log (``--tier-after
  1s``) for ``--seconds``; the offload's rate is the bytes tiered (one copy
  each) over the time from the first append until the tiered point reaches
  the last record.  The appends' rate is compared with the same appends to
  a log that is not tiered, in the same cluster, before (the aim: the
  appends keep at least 0.9 of their rate while the offload runs).
* **offload of a backlog**: the same appends to a third log whose
  ``--tier-after`` is an hour; then it is set to 1 s, and the offload's
  rate is the bytes over the time until the tiered point reaches the last
  record (one node, the log's owner, uploads them: a rate per node, not
  bounded by the appends' as the first figure is).  The CPU seconds the
  nodes and moto's server spend meanwhile (``/proc``) say whose the time
  is: ``offload_MBps_per_cpu_s`` is what the owner uploads per second of
  its own CPU, what it could do with a core to itself and the store on
  other machines.
* **reads**: the tiered log read whole with ``read_batches`` through the
  objects, with the nodes' block caches cold (new nodes) and then warm,
  against the same records read from the nodes' disks (a log that is not
  tiered, the same appends).

Medians of ``--repeat`` runs (a fresh cluster each), as JSON.

    .venv/bin/python bench/tier.py --repeat 3 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import logstrand
from logstrand.client import RecordRun
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, MotoServer
from logstrand.testing._moto import CREDENTIALS

SIZE = 10 * 1024
PER_APPEND = 100
LOCAL, TIERED, BACKLOG = 1, 2, 3
#: Clock ticks a second, for /proc/PID/stat's CPU times.
_TICKS = os.sysconf("SC_CLK_TCK")


def _append_for(client: logstrand.Client, log: int, seconds: float) -> tuple[int, float]:
    """Appends for ``seconds``: (bytes, elapsed)."""
    payloads = [b"x" * SIZE] * PER_APPEND
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        client.append_batch(log, payloads)
        n += PER_APPEND
    return n * SIZE, time.perf_counter() - t0


def _read_all(client: logstrand.Client, log: int, until: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    for items in client.read_batches(log, logstrand.LSN_OLDEST, until):
        n += sum(len(i) for i in items if isinstance(i, RecordRun))
    return n, time.perf_counter() - t0


def _cpu_s(pid: int) -> float:
    """CPU seconds (user and system) the process has used, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _backlog(c: LocalCluster, moto: MotoServer, seconds: float) -> dict[str, float]:
    """The offload of a backlog (the module docstring), its rate and CPU."""
    with logstrand.connect(c.url) as client:
        backlog_bytes, _ = _append_for(client, BACKLOG, seconds)
        last = client.tail_lsn(BACKLOG)
    pids = {n: c.processes[n].pid for n in (1, 2, 3)}
    moto_pid = moto.pid
    cpu0 = {n: _cpu_s(p) for n, p in pids.items()}
    moto0 = _cpu_s(moto_pid) if moto_pid else 0.0
    t0 = time.perf_counter()
    with open_epoch_store(c.url) as store:
        store.update_logs(BACKLOG, BACKLOG, tier_after_ms=1000)
    while _tier_point(c.url, BACKLOG) < last:
        time.sleep(0.05)
    took = time.perf_counter() - t0
    spent = {n: _cpu_s(p) - cpu0[n] for n, p in pids.items()}
    owner = max(spent, key=lambda n: spent[n])
    return {
        "offload_backlog_MBps": backlog_bytes / took / 1e6,
        "offload_cpu_s_owner": spent[owner],
        "offload_cpu_s_moto": (_cpu_s(moto_pid) - moto0) if moto_pid else 0.0,
        "offload_s": took,
        "offload_MBps_per_cpu_s": backlog_bytes / spent[owner] / 1e6,
    }


def _tier_point(url: str, log: int) -> int:
    with open_epoch_store(url) as store:
        return store.tier_state(log)[0]


def one_run(
    seconds: float, tmp: Path, moto: MotoServer, bucket: str, object_size: str = "64MiB"
) -> dict[str, float]:
    creds = tmp / "creds"
    creds.write_text("".join(f"{k}={v}\n" for k, v in CREDENTIALS.items()))
    args = ("--tier-url", f"s3://{bucket}/b", "--tier-endpoint", moto.endpoint,
            "--tier-credentials", str(creds), "--tier-interval", "0.2",
            "--tier-object-size", object_size,
            # Warm means in the cache: room for the whole log.
            "--tier-cache", "2GiB")  # fmt: skip
    out: dict[str, float] = {}
    with LocalCluster(tmp / "c", nodes=3, node_args=args) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(LOCAL, LOCAL, LogAttributes(replication_factor=2))
            store.create_logs(
                TIERED, TIERED, LogAttributes(replication_factor=2, tier_after_ms=1000)
            )
            store.create_logs(
                BACKLOG, BACKLOG, LogAttributes(replication_factor=2, tier_after_ms=3_600_000)
            )
        with logstrand.connect(c.url) as client:
            local_bytes, local_s = _append_for(client, LOCAL, seconds)
            t0 = time.perf_counter()
            tiered_bytes, tiered_s = _append_for(client, TIERED, seconds)
            last = client.tail_lsn(TIERED)
            while _tier_point(c.url, TIERED) < last:
                time.sleep(0.05)
            offload_s = time.perf_counter() - t0
            out["append_MBps_local"] = local_bytes / local_s / 1e6
            out["append_MBps_while_offloading"] = tiered_bytes / tiered_s / 1e6
            out["append_ratio"] = out["append_MBps_while_offloading"] / out["append_MBps_local"]
            out["offload_MBps"] = tiered_bytes / offload_s / 1e6
            out["offload_lag_s"] = offload_s - tiered_s
            # The same number of records from each log, for the reads.
            local_tail = client.tail_lsn(LOCAL)
            n_local, s_local = _read_all(client, LOCAL, local_tail)
            out["read_MBps_local"] = n_local * SIZE / s_local / 1e6
        # New node processes: their block caches are cold.
        for node in (1, 2, 3):
            c.stop_node(node)
            c.start_node(node)
        with logstrand.connect(c.url) as client:
            n_cold, s_cold = _read_all(client, TIERED, last)
            n_warm, s_warm = _read_all(client, TIERED, last)
            out["read_MBps_tiered_cold"] = n_cold * SIZE / s_cold / 1e6
            out["read_MBps_tiered_warm"] = n_warm * SIZE / s_warm / 1e6
            out["read_ratio_cold"] = out["read_MBps_tiered_cold"] / out["read_MBps_local"]
            out["read_ratio_warm"] = out["read_MBps_tiered_warm"] / out["read_MBps_local"]
        # Last: its appends and their flushes would slow the reads above.
        out |= _backlog(c, moto, seconds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--object-size",
        default="64MiB",
        help="the nodes' --tier-object-size (moto reads a whole object for each ranged GET)",
    )
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp, MotoServer(tmp) as moto:
        for i in range(args.repeat):
            moto.create_bucket(f"bench{i}")
            run_dir = Path(tmp) / f"run{i}"
            run_dir.mkdir()
            runs.append(one_run(args.seconds, run_dir, moto, f"bench{i}", args.object_size))
            print(json.dumps({k: round(v, 2) for k, v in runs[-1].items()}), flush=True)
    result: dict[str, Any] = {
        "medians": {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]},
        "runs": runs,
        "seconds": args.seconds,
        "record_bytes": SIZE,
        "object_size": args.object_size,
    }
    print(json.dumps(result["medians"], indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Rebuilding throughput: how fast a lost node's copies come back.

    python bench/rebuild.py [--mb 1000] [--repeat 3] [--json out.json]

A 4-node local cluster (SQLite epoch store), logs 1..4 with R=2 over all
nodes, ``--mb`` megabytes of 1 KiB records appended in batches of 1000.
Then node 4 is stopped and its directory deleted, and ``request_rebuild`` is
timed until node 4 is AUTHORITATIVE_EMPTY.  Reported per run:

* ``copies_MB_s``: bytes of copies re-created over the donors' walk (the
  run's duration less the settle time donors wait at its start);
* ``to_R_s``: from the request to every record back at R copies (the whole
  run, settle included);
* ``append_ratio``: 1 KiB appends (batches of 100) a second while the
  rebuilding runs, against the same client's rate just before it.

In the same process it measures the anchors, on the same file system: this
machine's RocksDB write rate (``../shared/bench/physical.py``'s ``rocks``:
WriteBatch of 1000 × 1 KiB, WAL on, no sync) and the read rate of a node's
data directory (its files read once, cold, after dropping the page cache
when root may).  Medians over ``--repeat`` runs (a fresh cluster each).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from logstrand.client import connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.rebuilding import StorageState
from logstrand.storage._options import NodeOptions
from logstrand.testing import LocalCluster

LOGS = (1, 2, 3, 4)
RECORD = 1024
SETTLE_S = NodeOptions().rebuild_settle_s


def _physical() -> Any:
    here = Path(__file__).resolve().parents[2] / "shared" / "bench"
    if not (here / "physical.py").exists():
        return None
    sys.path.insert(0, str(here))
    import physical  # type: ignore[import-not-found]

    return physical


def rocks_rate(directory: Path) -> float | None:
    physical = _physical()
    if physical is None:
        return None
    got = physical.rocks(str(directory / "rocks-anchor"), 200, 1000, RECORD, False)
    return float(got["MB_s"])


def read_rate(directory: str) -> float:
    """MB/s of reading every file of ``directory`` once."""
    with contextlib.suppress(OSError):
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    total, t0 = 0, time.perf_counter()
    for path in Path(directory).rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while chunk := f.read(4 << 20):
                    total += len(chunk)
    return total / (time.perf_counter() - t0) / 1e6


def load(url: str, mb: int) -> None:
    per_batch = 1000
    batches = max(1, mb * 1_000_000 // (RECORD * per_batch))
    payload = os.urandom(RECORD * per_batch)
    with connect(url) as client:
        for i in range(batches):
            log = LOGS[i % len(LOGS)]
            client.append_batch(
                log, [payload[j * RECORD : (j + 1) * RECORD] for j in range(per_batch)]
            )


def append_rate(url: str, stop: threading.Event, out: list[float], seconds: float) -> None:
    """Appends of 100 × 1 KiB a batch: records a second, until ``stop`` or ``seconds``."""
    payloads = [os.urandom(RECORD) for _ in range(100)]
    with connect(url) as client:
        n, t0 = 0, time.perf_counter()
        while not stop.is_set() and time.perf_counter() - t0 < seconds:
            client.append_batch(1, payloads)
            n += len(payloads)
        out.append(n / (time.perf_counter() - t0))


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling a donor until it is sent SIGINT (raw output in ``out``)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "-p", str(pid), "-r", "200", "--nonblocking", "-f", "raw", "-o",
            str(out)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _top_frames(raw: Path, n: int = 15) -> list[tuple[str, float]]:
    """bench/pyspy.py's summary (loaded by path: bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_pyspy", Path(__file__).parent / "pyspy.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    top: list[tuple[str, float]] = mod._top(raw, n)
    return top


def one_run(mb: int, base: Path, rate: str, profile: Path | None = None) -> dict[str, Any]:
    args = ("--rebuild-rate", rate) if rate != "0" else ()
    with LocalCluster(base, nodes=4, node_args=args) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, len(LOGS), LogAttributes(replication_factor=2))
        t0 = time.perf_counter()
        load(c.url, mb)
        load_s = time.perf_counter() - t0
        before: list[float] = []
        append_rate(c.url, threading.Event(), before, 5.0)
        c.stop_node(4)
        disk_read = read_rate(str(c.nodes[4].data_dir))
        c.wipe_node(4)
        during: list[float] = []
        stop = threading.Event()
        with open_epoch_store(c.url) as store:
            t1 = time.perf_counter()
            store.request_rebuild(4)
            time.sleep(SETTLE_S)  # donors start after it: measure appends while they work
            spy = _spy(c.procs[1].pid, profile) if profile is not None else None
            writer = threading.Thread(target=append_rate, args=(c.url, stop, during, 600.0))
            writer.start()
            try:
                while True:
                    st = store.rebuilding_state()
                    shard = st.shards.get(4)
                    if shard is not None and shard.state is not StorageState.REBUILDING:
                        break
                    time.sleep(0.2)
            finally:
                stop.set()
                writer.join()
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(timeout=60)
            to_r = time.perf_counter() - t1
            last = store.rebuilding_state().last or {}
        walk_s = max(1e-3, last.get("duration_ms", 0) / 1000 - SETTLE_S)
        return {
            "loaded_MB": mb,
            "load_s": load_s,
            "copies_records": last.get("records"),
            "copies_MB": last.get("bytes", 0) / 1e6,
            "copies_MB_s": last.get("bytes", 0) / 1e6 / walk_s,
            "to_R_s": to_r,
            "state": str(shard.state.value if shard else None),
            "append_before_rec_s": before[0],
            "append_during_rec_s": during[0] if during else 0.0,
            "append_ratio": (during[0] if during else 0.0) / before[0],
            "node_disk_read_MB_s": disk_read,
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1000, help="MB of 1 KiB records loaded")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rebuild-rate", default="0", help="the nodes' --rebuild-rate")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--profile", type=Path, help="py-spy a donor (node 1) in the first run; raw output here"
    )
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="rebuild-bench-") as tmp:
        anchor = rocks_rate(Path(tmp))
        for i in range(args.repeat):
            profile = args.profile if i == 0 else None
            got = one_run(args.mb, Path(tmp) / f"run{i}", args.rebuild_rate, profile)
            print(json.dumps(got), flush=True)
            runs.append(got)
    if args.profile is not None and args.profile.exists():
        print("donor (node 1), self time:")
        for frame, share in _top_frames(args.profile):
            print(f"  {share:6.1%}  {frame}")
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "state"}
    print("| figure | median |")
    print("|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:,.2f} |")
    print(f"| rocksdb_write_MB_s (anchor) | {anchor if anchor is None else f'{anchor:,.1f}'} |")
    if args.json:
        args.json.write_text(
            json.dumps({"runs": runs, "median": med, "rocksdb_write_MB_s": anchor}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

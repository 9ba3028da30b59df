"""One record at a time: the producer's buffer against threads and loops,
beside Redis Streams in the same run.

    .venv/bin/python bench/single.py [--repeat 3] [--records 50000] [--trace]

Each repeat starts a fresh local 3-node cluster (R=2, SQLite epoch store,
100 B records) and a fresh Redis (``bench/single_redis.py``: AOF everysec,
the server ``../shared/bench/peers.py`` runs; installed as ``bench/compare.py``
installs the peers), and runs the same cases (``bench/_single_cases.py``):

- one thread, N x ``append_async``, then wait for every future (Redis: one
  pipeline of N XADDs);
- 16 and 64 threads, each ``append`` in a loop (Redis: a connection each,
  XADD in a loop);
- one thread, sequential ``append``: p50 and p99;
- 8 threads appending 5,000 records/s between them: p50 and p99.

Prints the medians of the repeats and logstrand/Redis ratios (for the
latencies, Redis/logstrand: above 1 is better for logstrand too).

``--trace`` runs 2,000 sequential appends once more with ``LOGSTRAND_TRACE``
set (``logstrand._trace``) and prints where an append's time goes, stage by
stage, from the marks of the client and the three nodes.  ``--trace-big``
runs the trace alone over 300 sequential ``append_batch`` calls of 100 x
10 KiB (one 1 MiB APPEND each): where a big batch's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _single_cases import PAYLOAD, sequential, steady, threads  # noqa: E402

CASES = (
    ("append_async", "one thread, {records:,} x append_async, then wait", "rec/s"),
    ("threads16", "16 threads, each append in a loop", "rec/s"),
    ("threads64", "64 threads, each append in a loop", "rec/s"),
    ("p50_ms", "one thread, sequential append: p50", "ms"),
    ("p99_ms", "one thread, sequential append: p99", "ms"),
    ("steady_p50_ms", "8 threads, 5,000 appends/s: p50", "ms"),
    ("steady_p99_ms", "8 threads, 5,000 appends/s: p99", "ms"),
)


def logstrand_run(records: int, seconds: float) -> dict[str, float]:
    import logstrand
    from logstrand.epochstore import LogAttributes, open_epoch_store
    from logstrand.testing import LocalCluster

    with tempfile.TemporaryDirectory() as d, LocalCluster(f"{d}/c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            for log in range(1, 6):  # sequencers activated, outside the measures
                client.append(log, b"warm")

            def on(log: int):  # type: ignore[no-untyped-def]
                return lambda: lambda: client.append(log, PAYLOAD)

            out: dict[str, float] = {}
            out["p50_ms"], out["p99_ms"] = sequential(on(3)(), 2000)
            t0 = time.perf_counter()
            futures = [client.append_async(1, PAYLOAD) for _ in range(records)]
            for f in futures:
                f.result(120)
            out["append_async"] = records / (time.perf_counter() - t0)
            out["threads16"] = threads(on(2), 16, 300)
            out["threads64"] = threads(on(2), 64, 150)
            out["steady_p50_ms"], out["steady_p99_ms"] = steady(on(4), 8, 5000, seconds)
            return out


def redis_run(records: int, seconds: float) -> dict[str, float] | None:
    from compare import _ensure_peers

    python = _ensure_peers()
    if python is None:
        return None
    cmd = [python, str(HERE / "single_redis.py"), "--records", str(records)]
    done = subprocess.run([*cmd, "--seconds", str(seconds)], capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(done.stdout)
    return result


def table(runs: list[dict[str, float]], peers: list[dict[str, float]], records: int) -> None:
    med = {k: statistics.median(r[k] for r in runs) for k, _, _ in CASES}
    pmed = {k: statistics.median(r[k] for r in peers) for k, _, _ in CASES} if peers else {}
    print(f"3 nodes, R=2, 100 B records; medians of {len(runs)} runs (Redis: {len(peers)})\n")
    print("| case | Redis Streams | logstrand | ratio |")
    print("|---|---|---|---|")
    for k, label, unit in CASES:
        ours = med[k]
        theirs = pmed.get(k)
        if unit == "ms":
            cell, peer = f"{ours:.2f} ms", "" if theirs is None else f"{theirs:.2f} ms"
            ratio = "" if theirs is None else f"{theirs / ours:.2f}x"
        else:
            cell, peer = f"{ours:,.0f} rec/s", "" if theirs is None else f"{theirs:,.0f} rec/s"
            ratio = "" if theirs is None else f"{ours / theirs:.2f}x"
        print(f"| {label.format(records=records)} | {peer} | {cell} | {ratio} |")


# -- the per-stage trace ---------------------------------------------------------------


BIG = [b"y" * 10240] * 100


def trace_child(directory: str, big: bool = False) -> None:
    """In a process started with LOGSTRAND_TRACE: 2,000 sequential appends
    (``big``: 300 appends of one 1 MiB batch)."""
    import logstrand
    from logstrand.epochstore import LogAttributes, open_epoch_store
    from logstrand.testing import LocalCluster

    with LocalCluster(f"{directory}/c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            for _ in range(200):
                client.append(1, PAYLOAD)
            with open(f"{directory}/measured", "w") as f:
                f.write(str(time.monotonic_ns()))
            if big:
                from logstrand import _trace

                def one_batch() -> None:
                    # The blocking client marks ``append`` only: its batch here.
                    _trace.mark("client.call")
                    client.append_batch(1, BIG)
                    _trace.mark("client.return")

                sequential(one_batch, 300)
            else:
                sequential(lambda: client.append(1, PAYLOAD), 2000)


def trace(big: bool = False) -> None:
    with tempfile.TemporaryDirectory() as d:
        marks_dir = f"{d}/marks"
        env = {**os.environ, "LOGSTRAND_TRACE": marks_dir}
        child = [sys.executable, __file__, "--trace-child", d] + (["--trace-big"] if big else [])
        subprocess.run(child, env=env, check=True)
        since = int(Path(f"{d}/measured").read_text())
        marks: list[tuple[int, int, str]] = []
        for path in Path(marks_dir).glob("*.trace"):
            pid = int(path.stem)
            for line in path.read_text().splitlines():
                ns, stage = line.split()
                if int(ns) >= since:
                    marks.append((int(ns), pid, stage))
    marks.sort()
    print(stage_table(marks))


def stage_table(marks: list[tuple[int, int, str]]) -> str:
    """Cut the marks at each client.call .. client.return; in each append,
    when each stage was reached (a node's stages tagged with whether it runs
    the sequencer; a stage met twice, such as a STORE reply, numbered), as
    medians from the call."""
    at: dict[str, list[float]] = defaultdict(list)
    appends = 0
    current: list[tuple[int, int, str]] | None = None
    for ns, pid, stage in marks:
        if stage == "client.call":
            current = [(ns, pid, stage)]
        elif current is not None:
            current.append((ns, pid, stage))
            if stage == "client.return":
                appends += 1
                for name, t in _first_times(current).items():
                    at[name].append(t)
                current = None
    rows = sorted(((statistics.median(v), k, len(v)) for k, v in at.items()), key=lambda r: r[0])
    out = [f"per-stage trace: {appends:,} sequential appends, medians from the call (us)\n"]
    out.append("| stage | since the call | since the stage before |")
    out.append("|---|---|---|")
    before = 0.0
    for t, name, n in rows:
        seen = "" if n == appends else f" (in {n / appends:.0%})"
        out.append(f"| {name}{seen} | {t:,.0f} | {t - before:,.0f} |")
        before = t
    return "\n".join(out)


def _first_times(one: list[tuple[int, int, str]]) -> dict[str, float]:
    t0, client_pid = one[0][0], one[0][1]
    seq_pid = next((pid for _, pid, stage in one if stage == "seq.append"), None)
    first: dict[str, float] = {}
    for ns, pid, stage in one:
        if stage.startswith(("store.", "net.")):
            role = "client" if pid == client_pid else "sequencer" if pid == seq_pid else "peer"
            stage += f"@{role}"
        name, n = stage, 1
        while name in first:  # a stage met again: its second time, and so on
            n += 1
            name = f"{stage} #{n}"
        first[name] = (ns - t0) / 1000
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--seconds", type=float, default=5.0, help="of the steady case")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--trace", action="store_true", help="also the per-stage trace")
    ap.add_argument("--trace-big", action="store_true", help="only the trace, of 1 MiB batches")
    ap.add_argument("--trace-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trace_child:
        trace_child(args.trace_child, args.trace_big)
        return
    if args.trace_big:
        trace(big=True)
        return
    runs, peers = [], []
    for _ in range(args.repeat):
        runs.append(logstrand_run(args.records, args.seconds))
        if not args.no_redis:
            peer = redis_run(args.records, args.seconds)
            if peer is not None:
                peers.append(peer)
    if runs:
        table(runs, peers, args.records)
    if args.trace:
        print()
        trace()


if __name__ == "__main__":
    main()

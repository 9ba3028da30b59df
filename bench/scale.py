"""Many logs: what each costs as their number grows.

    .venv/bin/python bench/scale.py [--logs 1000,10000] [--repeat 1]

For each N, on a fresh local 3-node cluster (R=2, 100 B records):

- ``create``: ``create_logs(1, N)`` in the epoch store;
- ``first``: one ``append_async`` to every log, at most 256 unanswered (each
  activates the log's sequencer): seconds, activations/s and errors;
- ``again``: one more record to every log, a loop of ``append_async``: rec/s,
  and the copies the nodes' group commits wrote per RocksDB write meanwhile
  (``again_copies_per_write`` in each run's line), and the CPU the client and
  the nodes used per record (``again_cpu_ms_per_record``) and each one's share
  of a core meanwhile (``again_cores``: the client, then the nodes);
- ``tails``: ``tail_lsns`` of every log (one round per node): seconds;
- activations per log over those phases, from the nodes' counters: 1.00
  unless sequencers moved (a node taken for dead gives its logs away); the
  nodes' full garbage collections, and how many paused a loop over 0.25 s;
- ``idle``: the nodes' CPU (% of a core, each) and RSS over 10 s with
  nothing written; RSS growth per active log against a cluster with none;
- ``tail``: one client tails the first ``--streams`` logs (``read_many``)
  and catches up; with nothing written, the RSS per open log (nodes,
  client) and the nodes' CPU; then another process appends ``--tail-rate``
  records/s over those logs in turn for ``--tail-seconds``: the rate it
  reached, the share delivered and the delivery latency
  (``bench/_scale_tail.py``);
- ``restart`` (with ``--restart stop,kill``): node 1, with a third of the
  active sequencers, is stopped (SIGTERM: it hands its logs off) or killed,
  and started again, and one more record goes to every log: how long the
  stop took, the epochs it ended, the seconds until every append ended,
  errors, and the epochs recovered record by record (``bench/_scale_restart.py``).

Prints one table row per N and the growth of per-log costs from the
smallest N to the largest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from _scale_restart import restart
from _scale_tail import tail

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, cpu_s, rss_mb

PAYLOAD = b"x" * 100
WINDOW = 256


def windowed(client: logstrand.Client, logs: range) -> tuple[float, int]:
    """One append_async per log, at most WINDOW unanswered: (seconds, errors)."""
    room = threading.Semaphore(WINDOW)
    errors = [0]

    def done(lsn: int, error: BaseException | None) -> None:
        if error is not None:
            errors[0] += 1
        room.release()

    t0 = time.perf_counter()
    for log in logs:
        room.acquire()
        client.append_async(log, PAYLOAD, on_delivery=done)
    client.flush(600)
    return time.perf_counter() - t0, errors[0]


def idle(cluster: LocalCluster, seconds: float) -> tuple[float, float]:
    """The nodes' mean CPU (% of a core) and mean RSS (MiB) over ``seconds``."""
    pids = [p.pid for p in cluster.procs.values()]
    c0 = cpu_s(pids)
    time.sleep(seconds)
    cpu = (cpu_s(pids) - c0) / seconds / len(pids) * 100
    return cpu, statistics.mean(rss_mb(p) for p in pids)


def full_collections(cluster: LocalCluster) -> tuple[float, float]:
    """Full garbage collections on the nodes so far, and those that paused a
    node's loop for more than 0.25 s (``logstrand_gc_seconds``)."""
    full = quick = 0.0
    for i in cluster.nodes:
        full += cluster.metric(i, 'logstrand_gc_seconds_count{generation="2"}', 0.0)
        quick += cluster.metric(i, 'logstrand_gc_seconds_bucket{generation="2",le="0.25"}', 0.0)
    return full, full - quick


def commits(c: LocalCluster) -> tuple[float, float]:
    """Record copies stored and group-commit writes so far, over the nodes."""
    copies = sum(c.metric(i, "logstrand_store_records_total", 0.0) for i in c.nodes)
    return copies, sum(c.metric(i, "logstrand_group_commits_total", 0.0) for i in c.nodes)


def one(
    n: int, idle_s: float, streams: int, rate: float, seconds: float, restarts: list[str]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d, LocalCluster(f"{d}/c", nodes=3) as c:
        out: dict[str, Any] = {"logs": n}
        out["cpu0"], out["rss0"] = idle(c, min(idle_s, 5.0))
        t0 = time.perf_counter()
        with open_epoch_store(c.url) as es:
            es.create_logs(1, n, LogAttributes(replication_factor=2))
        out["create_s"] = time.perf_counter() - t0
        settings = logstrand.ClientSettings(append_timeout_s=120.0)
        with logstrand.connect(c.url, settings=settings) as client:
            out["first_s"], out["first_errors"] = windowed(client, range(1, n + 1))
            writes0 = commits(c)
            pids = [os.getpid(), *(p.pid for p in c.procs.values())]
            each0 = [cpu_s([p]) for p in pids]
            t0 = time.perf_counter()
            for log in range(1, n + 1):
                client.append_async(log, PAYLOAD)
            left = client.flush(600)
            took = time.perf_counter() - t0
            each = [cpu_s([p]) - c for p, c in zip(pids, each0, strict=True)]
            out["again_rps"] = n / took
            out["again_left"] = left
            copies, writes = (b - a for a, b in zip(writes0, commits(c), strict=True))
            out["again_copies_per_write"] = copies / max(writes, 1)
            out["again_cpu_ms_per_record"] = sum(each) * 1000 / n
            # Each process's share of a core over the round: the client, then the nodes.
            out["again_cores"] = [round(x / took, 2) for x in each]
            t0 = time.perf_counter()
            client.tail_lsns(range(1, n + 1))
            out["tails_s"] = time.perf_counter() - t0
        # One activation per log, unless sequencers moved (a node taken for
        # dead, or one that paused, gives its logs to the others).
        activations = sum(c.metric(i, "logstrand_sequencer_activations_total") for i in c.nodes)
        out["activations_per_log"] = activations / n
        out["gc_full"], out["gc_full_slow"] = full_collections(c)
        out["cpu"], out["rss"] = idle(c, idle_s)
        # Each run's own numbers as they come (a 100,000-log run takes many minutes).
        print(f"run: {out}", file=sys.stderr, flush=True)
        if streams:
            got = tail(c, range(1, min(n, streams) + 1), 2, rate, seconds)
            out.update({f"tail_{k}": v for k, v in got.items()})
        for how in restarts:
            got = restart(c, n, how)
            print(f"restart ({how}): {got}", file=sys.stderr, flush=True)
            out.update({f"{how}_{k}": v for k, v in got.items()})
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--logs", default="1000,10000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--streams", type=int, default=10_000, help="logs tailed (0: no tail phase)")
    ap.add_argument("--tail-rate", type=float, default=20_000.0, help="records/s offered")
    ap.add_argument("--tail-seconds", type=float, default=5.0)
    ap.add_argument(
        "--restart", default="", help="restart phases, in turn: stop (SIGTERM), kill (SIGKILL)"
    )
    args = ap.parse_args()
    sizes = [int(x) for x in args.logs.split(",")]
    restarts = [x for x in args.restart.split(",") if x]
    if any(x not in ("stop", "kill") for x in restarts):
        ap.error("--restart takes stop and kill")
    rows = []
    for n in sizes:
        runs = [
            one(n, args.idle_seconds, args.streams, args.tail_rate, args.tail_seconds, restarts)
            for _ in range(args.repeat)
        ]
        rows.append({k: statistics.median(r[k] for r in runs) for k in runs[0]})
    print(f"3 nodes, R=2, SQLite epoch store, medians of {args.repeat} run(s)\n")
    print(
        "| logs | create | first appends | activations/s | errors | one more each "
        "| tail_lsns of all | idle CPU/node | RSS/node | RSS per active log | activations per log "
        "| full GCs (over 0.25 s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        per_log_kib = (r["rss"] - r["rss0"]) * 1024 / r["logs"]
        print(
            f"| {r['logs']:,} | {r['create_s']:.2f} s | {r['first_s']:.1f} s "
            f"| {r['logs'] / r['first_s']:,.0f} | {r['first_errors']:.0f} "
            f"| {r['again_rps']:,.0f} rec/s | {r['tails_s']:.1f} s "
            f"| {r['cpu']:.1f}% (none: {r['cpu0']:.1f}%) | {r['rss']:.0f} MiB "
            f"| {per_log_kib:.1f} KiB | {r['activations_per_log']:.2f} "
            f"| {r['gc_full']:.0f} ({r['gc_full_slow']:.0f}) |"
        )
    if "tail_p50_ms" in rows[0]:
        print(
            "\n| logs | tailed | catch up | RSS per open log, nodes | RSS per open log, client "
            "| idle CPU/node, tailing | offered | sent | delivered | append p50 "
            "| delivery p50 | delivery p99 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['logs']:,} | {min(r['logs'], args.streams):,} "
                f"| {r['tail_catch_up_s']:.1f} s | {r['tail_nodes_kib']:.1f} KiB "
                f"| {r['tail_client_kib']:.1f} KiB | {r['tail_idle_cpu']:.1f}% "
                f"| {r['tail_offered_rps']:,.0f} rec/s | {r['tail_sent_rps']:,.0f} rec/s "
                f"| {r['tail_delivered']:.1%} | {r['tail_append_p50_ms']:.1f} ms "
                f"| {r['tail_p50_ms']:.1f} ms "
                f"| {r['tail_p99_ms']:.1f} ms |"
            )
    if restarts:
        print(
            "\n| logs | node 1 | stop took | epochs ended | one more each after the restart "
            "| errors | epochs recovered |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            for how in restarts:
                ended = f"{r[how + '_ended']:,.0f} of {r[how + '_sequencers']:,.0f}"
                print(
                    f"| {r['logs']:,} | {how} | {r[how + '_stop_s']:.1f} s "
                    f"| {ended if how == 'stop' else '-'} | {r[how + '_after_s']:.1f} s "
                    f"| {r[how + '_errors']:,.0f} | {r[how + '_recovered']:,.0f} |"
                )
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(
            f"\nper-log growth {a['logs']:,} -> {b['logs']:,}: activation "
            f"{(b['first_s'] / b['logs']) / (a['first_s'] / a['logs']):.2f}x, "
            f"one more record {(a['again_rps'] / b['again_rps']):.2f}x, "
            f"tail_lsns {(b['tails_s'] / b['logs']) / (a['tails_s'] / a['logs']):.2f}x"
        )


if __name__ == "__main__":
    main()

"""Sequencer failover time: kill the sequencer's node, time the takeover.

    python bench/failover.py [--kills 20] [--deadline 30] [--json out.json]

For each kill (SIGKILL of the node running log 1's sequencer, 3 nodes, R=2,
SQLite epoch store): the time to the first acknowledged append in the new
epoch, and to that record being released to readers (a read of exactly that
LSN returns).  The killed node is restarted at once, as soon as it answers a
handshake, before the next round: back-to-back failovers while membership
still lags are the case that once stalled a log for minutes.

Every wait has a deadline (``--deadline`` seconds a round).  A round that
misses it is reported as stalled, with the last lines of every node's log,
and the run goes on; the exit status is 1 if any round stalled.  Prints
p50/p99 and the slowest round.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import logstrand
from logstrand import Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def tail_of_logs(directory: Path, lines: int = 8) -> str:
    out = []
    for path in sorted((directory / "logs").glob("node*.log")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {path.name}\n" + "\n".join(text))
    return "\n".join(out)


async def one_round(
    client: logstrand.AsyncClient, cluster: LocalCluster, deadline_s: float
) -> tuple[float, float]:
    """Kill the sequencer's node; (seconds to the first ack, to its release)."""
    with trio.fail_after(deadline_s):
        before = await client.append(1, b"before")
        owner = cluster.sequencer_of(1, lsn_epoch(before))
        t0 = time.monotonic()
        await trio.to_thread.run_sync(cluster.kill_node, owner)
        lsn = await client.append(1, b"after")
        t_ack = time.monotonic()
        assert lsn_epoch(lsn) > lsn_epoch(before), (before, lsn)
        async with client.read(1, lsn, lsn) as reader:
            got = [x async for x in reader if isinstance(x, Record)]
        t_rel = time.monotonic()
        assert [r.lsn for r in got] == [lsn], got
        # Restart it at once (as soon as it answers a handshake): the next
        # round kills the new sequencer's node while the others' membership
        # still has this one dead, and it is just back.
        await trio.to_thread.run_sync(cluster.start_node, owner)
        return t_ack - t0, t_rel - t0


async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    to_ack: list[float] = []
    to_release: list[float] = []
    stalled: list[int] = []
    settings = logstrand.ClientSettings(append_timeout_s=30, append_attempt_timeout_s=0.5)
    with LocalCluster(directory) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        async with logstrand.open_client(c.url, settings=settings) as client:
            for i in range(args.kills):
                try:
                    ack, rel = await one_round(client, c, args.deadline)
                except trio.TooSlowError:
                    stalled.append(i)
                    print(f"round {i}: STALLED past {args.deadline} s", file=sys.stderr)
                    print(tail_of_logs(directory), file=sys.stderr)
                    for node_id in c.nodes:  # bring every node back for the next round
                        await trio.to_thread.run_sync(c.start_node, node_id)
                    continue
                to_ack.append(ack)
                to_release.append(rel)
                if args.verbose:
                    print(f"round {i}: ack {ack:.3f} s, release {rel:.3f} s", file=sys.stderr)
    return {
        "kills": args.kills,
        "stalled_rounds": stalled,
        "ack_p50_s": pct(to_ack, 0.5),
        "ack_p99_s": pct(to_ack, 0.99),
        "release_p50_s": pct(to_release, 0.5),
        "release_p99_s": pct(to_release, 0.99),
        "release_max_s": max(to_release, default=float("nan")),
        "ack_max_s": max(to_ack, default=float("nan")),
        "rounds": [{"ack_s": a, "release_s": r} for a, r in zip(to_ack, to_release, strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=30.0, help="seconds a round may take")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None, help="run in this directory and keep it")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.keep:
        directory = Path(args.keep)
        directory.mkdir(parents=True, exist_ok=True)
        res = trio.run(run, args, directory)
    else:
        with tempfile.TemporaryDirectory(prefix="logstrand-failover-") as d:
            res = trio.run(run, args, Path(d))
    stalled = res["stalled_rounds"]
    print(f"sequencer failover over {args.kills} SIGKILLs (3 nodes, R=2, SQLite epoch store)")
    print("| from the kill to | p50 | p99 | slowest |")
    print("|---|---|---|---|")
    print(
        f"| first acknowledged append | {res['ack_p50_s']:.2f} s | {res['ack_p99_s']:.2f} s "
        f"| {res['ack_max_s']:.2f} s |"
    )
    print(
        f"| that record released to readers | {res['release_p50_s']:.2f} s | "
        f"{res['release_p99_s']:.2f} s | {res['release_max_s']:.2f} s |"
    )
    print(f"stalled rounds (past {args.deadline} s): {len(stalled)} {stalled or ''}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    if stalled:
        sys.exit(1)


if __name__ == "__main__":
    main()

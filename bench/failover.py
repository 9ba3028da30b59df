"""Sequencer failover time: kill the sequencer's node, time the takeover.

    python bench/failover.py [--kills 20] [--json out.json]

For each kill (SIGKILL of the node running log 1's sequencer, 3 nodes, R=2,
SQLite epoch store): the time to the first acknowledged append in the new
epoch, and to that record being released to readers (a read of exactly that
LSN returns).  The killed node is restarted before the next round.  Prints
p50/p99.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import logstrand
from logstrand import Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    to_ack: list[float] = []
    to_release: list[float] = []
    settings = logstrand.ClientSettings(append_timeout_s=30, append_attempt_timeout_s=0.5)
    with tempfile.TemporaryDirectory(prefix="logstrand-failover-") as d, LocalCluster(d) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url, settings=settings) as client:
            for _ in range(args.kills):
                before = client.append(1, b"before")
                owner = c.sequencer_of(1, lsn_epoch(before))
                t0 = time.monotonic()
                c.kill_node(owner)
                lsn = client.append(1, b"after")
                t_ack = time.monotonic()
                assert lsn_epoch(lsn) > lsn_epoch(before)
                got = [x for x in client.read(1, lsn, lsn) if isinstance(x, Record)]
                t_rel = time.monotonic()
                assert [r.lsn for r in got] == [lsn]
                to_ack.append(t_ack - t0)
                to_release.append(t_rel - t0)
                c.start_node(owner)

    res = {
        "kills": args.kills,
        "ack_p50_s": pct(to_ack, 0.5),
        "ack_p99_s": pct(to_ack, 0.99),
        "release_p50_s": pct(to_release, 0.5),
        "release_p99_s": pct(to_release, 0.99),
    }
    print(f"sequencer failover over {args.kills} SIGKILLs (3 nodes, R=2, SQLite epoch store)")
    print("| from the kill to | p50 | p99 |")
    print("|---|---|---|")
    print(f"| first acknowledged append | {res['ack_p50_s']:.2f} s | {res['ack_p99_s']:.2f} s |")
    print(
        f"| that record released to readers | {res['release_p50_s']:.2f} s | "
        f"{res['release_p99_s']:.2f} s |"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()

"""Many small compacted logs: how long until the background cleaner has
visited (cleaned) every one.

    python bench/compaction_visits.py [--logs 10000] [--interval 10] [--cap 720]

A local 3-node cluster (R=2) with ``--compaction-interval INTERVAL``; ``--logs``
compacted logs (``min_cleanable_ratio`` 0.1), each made dirty with one key
written twice (at most 256 appends unanswered).  Then, every 20 s, each log
not yet clean is asked its compaction state, until every log's clean point
covers its second record or ``--cap`` seconds have passed.  Prints how many
were clean at each look and the time until the last one was (issue 35's aim:
10,000 small compacted logs each visited within 10 minutes).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Callable

WINDOW = 256


def dirty_every_log(client: logstrand.Client, n: int) -> dict[int, int]:
    """One key written twice to each log; each log's second LSN."""
    room = threading.Semaphore(WINDOW)
    tops: dict[int, int] = {}

    def on_delivery(log: int) -> Callable[[int, BaseException | None], None]:
        def done(lsn: int, error: BaseException | None) -> None:
            room.release()
            if error is None:
                tops[log] = max(tops.get(log, 0), lsn)

        return done

    for value in (b"old", b"new"):
        for log in range(1, n + 1):
            room.acquire()
            client.append_async(log, value, key=b"k", on_delivery=on_delivery(log))
        client.flush(600)
    return tops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--logs", type=int, default=10_000)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--cap", type=float, default=720.0)
    args = ap.parse_args()
    attributes = LogAttributes(
        replication_factor=2, cleanup_policy="compact", min_cleanable_ratio=0.1
    )
    node_args = ("--compaction-interval", str(args.interval))
    with (
        tempfile.TemporaryDirectory() as d,
        LocalCluster(Path(d) / "c", nodes=3, node_args=node_args) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, args.logs, attributes)
        settings = logstrand.ClientSettings(append_timeout_s=120.0)
        with logstrand.connect(cluster.url, settings=settings) as client:
            tops = dirty_every_log(client, args.logs)
            print(f"{len(tops)} of {args.logs} logs dirty", flush=True)
            t0 = time.monotonic()
            left = set(tops)
            while left and time.monotonic() - t0 < args.cap:
                time.sleep(20)
                for log in sorted(left):
                    state = client.compaction_state(log)
                    if state and state["clean_point"] >= tops[log]:
                        left.discard(log)
                took = time.monotonic() - t0
                print(f"{took:.0f} s: {len(tops) - len(left)} clean", flush=True)
        took = time.monotonic() - t0
        print(f"{len(tops) - len(left)} of {len(tops)} logs clean after {took:.0f} s")


if __name__ == "__main__":
    main()

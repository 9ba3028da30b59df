"""A node comes back with a wiped disk, then another node dies: what a reader gets.

    python bench/wiped_then_lost.py [--wait 15]

4 nodes, log 1 with R=2, 1000 records of 100 B in 10 batches.  Node 4 is
stopped, its directory deleted, and it is started again (empty); ``--wait``
seconds later node 3 is killed, and log 1 is read to its tail (30 s at most).
Prints how many records were read and the gaps other than BRIDGE.

With rebuilding the wiped node is recognised, rebuilt by itself and every
record is read.  Run from a worktree of a commit before rebuilding (with
``PYTHONPATH=<worktree>``, so that the nodes run that code) it shows the false
DATALOSS that the wiped node's "not here" caused: the records it had lost
were still on node 3, which was only down.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import trio

from logstrand import Record
from logstrand.client import connect, open_client
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


async def read_all(url: str, tail: int) -> tuple[int, list[tuple[str, int, int]], bool]:
    read, gaps = 0, []
    async with open_client(url) as client:
        with trio.move_on_after(30) as scope:
            async with client.read(1, 0, tail) as reader:
                async for item in reader:
                    if isinstance(item, Record):
                        read += 1
                    elif item.type.name != "BRIDGE":
                        gaps.append((item.type.name, item.lo, item.hi))
    return read, gaps, scope.cancelled_caught


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wait", type=float, default=15.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, LocalCluster(d, nodes=4) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with connect(c.url) as client:
            for _ in range(10):
                client.append_batch(1, [os.urandom(100) for _ in range(100)])
            tail = client.tail_lsn(1)
        c.stop_node(4)
        shutil.rmtree(c.nodes[4].data_dir)
        c.start_node(4)
        time.sleep(args.wait)
        c.kill_node(3)
        read, gaps, stalled = trio.run(read_all, c.url, tail)
        print(f"read {read} of 1000 records; gaps {gaps}; reader gave up waiting: {stalled}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

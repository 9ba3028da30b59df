"""``bench/scale.py``'s tail phase: one client tails many logs at once.

A trio client follows the first S logs with ``read_many`` from LSN 1 (each has
the records the earlier phases appended), reads until every log has given
``have`` records, and notes the RSS of the nodes and of this process; then
a second client appends one record to each of those logs, each carrying the
time it was appended, and the reader notes when each arrives.  Reports the
RSS per open stream (nodes, client) and the delivery latency's p50 and p99.
"""

from __future__ import annotations

import os
import statistics
import struct
import time
from typing import Any

import trio

import logstrand
from logstrand.testing import LocalCluster, rss_mb

STAMP = struct.Struct(">d")


async def _tail(c: LocalCluster, logs: range, have: int) -> dict[str, Any]:
    pids = [p.pid for p in c.procs.values()]
    nodes0 = sum(rss_mb(p) for p in pids)
    me0 = rss_mb(os.getpid())
    seen = dict.fromkeys(logs, 0)
    caught_up = trio.Event()
    all_late = trio.Event()
    late: list[float] = []
    out: dict[str, Any] = {}
    async with logstrand.open_client(c.url) as reader, logstrand.open_client(c.url) as writer:
        behind = len(logs)

        def take(log: int, item: object) -> None:
            """Note one item."""
            nonlocal behind
            if not isinstance(item, logstrand.Record):
                return
            seen[log] += 1
            if seen[log] == have:
                behind -= 1
                if behind == 0:
                    caught_up.set()
            elif seen[log] > have and item.payload is not None:
                late.append(time.time() - STAMP.unpack_from(item.payload)[0])
                if len(late) == len(logs):
                    all_late.set()

        async def read() -> None:
            # Read until cancelled: leaving ``read_many``'s loop early would
            # leave its nursery open in a suspended generator.
            async for log, item in reader.read_many(dict.fromkeys(logs, 1), None):
                take(log, item)

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            with trio.fail_after(600):
                await caught_up.wait()
            out["catch_up_s"] = time.perf_counter() - t0
            await trio.sleep(2.0)
            out["nodes_kib"] = (sum(rss_mb(p) for p in pids) - nodes0) * 1024 / len(logs)
            out["client_kib"] = (rss_mb(os.getpid()) - me0) * 1024 / len(logs)
            for log in logs:
                await writer.append(log, STAMP.pack(time.time()) + b"." * 92)
            with trio.fail_after(600):
                await all_late.wait()
            nursery.cancel_scope.cancel()
    late.sort()
    out["p50_ms"] = statistics.median(late) * 1000
    out["p99_ms"] = late[int(len(late) * 0.99) - 1] * 1000
    return out


def tail(c: LocalCluster, logs: range, have: int) -> dict[str, Any]:
    """Run the tail phase (see the module docstring) and return its figures."""
    return trio.run(_tail, c, logs, have)

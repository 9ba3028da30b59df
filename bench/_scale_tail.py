"""``bench/scale.py``'s tail phase: one client tails many logs at once.

A trio client follows the first S logs with ``read_many`` from LSN 1 (each
has ``have`` records from the earlier phases) and reads until it has them
all: the catch-up time.  With every stream open and nothing written, it
notes the RSS of the nodes and of this process (per open log) and the
nodes' CPU.  Then another process appends records stamped with the time
they were sent, one record per ``append_async``, over the S logs in turn,
at a paced rate (at most 256 unanswered) for some seconds; the reader notes
when each arrives.  Reports the rate offered and reached, records delivered
(all must be), and the delivery latency's p50 and p99 (send to delivery, so
it includes the append's own latency).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import struct
import threading
import time
from typing import Any

import trio

import logstrand
from logstrand.testing import LocalCluster, cpu_s, rss_mb

STAMP = struct.Struct(">d")
PAD = b"." * 92  # 100 B records
#: Appends the writer leaves unanswered at most.
WINDOW = 256


def _write(
    url: str, logs: range, rate: float, seconds: float, sent: Any, took: Any, acked: Any
) -> None:
    """Append up to ``rate`` records/s over ``logs`` in turn for ``seconds``,
    at most ``WINDOW`` unanswered (so a record's latency is not time spent
    queued behind an offered rate the cluster cannot take); in another
    process, so the reader's CPU is its own.  ``acked``: the appends' own
    latency, p50 (send to acknowledgment)."""
    settings = logstrand.ClientSettings(append_timeout_s=120.0)
    room = threading.Semaphore(WINDOW)
    latencies: list[float] = []
    n = 0

    def done(t: float) -> Any:
        def on_delivery(_lsn: int, _error: BaseException | None) -> None:
            latencies.append(time.time() - t)
            room.release()

        return on_delivery

    with logstrand.connect(url, settings=settings) as client:
        t0 = time.perf_counter()
        while (now := time.perf_counter() - t0) < seconds:
            due = int(now * rate)
            while n < due and room.acquire(timeout=0.005):
                t = time.time()
                client.append_async(logs[n % len(logs)], STAMP.pack(t) + PAD, on_delivery=done(t))
                n += 1
            time.sleep(0.002)
        client.flush(600)
        sent.value = n
        took.value = time.perf_counter() - t0
        acked.value = statistics.median(latencies) if latencies else 0.0


async def _tail(
    c: LocalCluster, logs: range, have: int, rate: float, seconds: float
) -> dict[str, Any]:
    pids = [p.pid for p in c.procs.values()]
    nodes0 = sum(rss_mb(p) for p in pids)
    me0 = rss_mb(os.getpid())
    seen = dict.fromkeys(logs, 0)
    late: list[float] = []
    out: dict[str, Any] = {}
    behind = len(logs)
    async with logstrand.open_client(c.url) as client:
        t0 = time.perf_counter()
        async with client.read_many(dict.fromkeys(logs, 1), None) as reader:

            async def take() -> None:
                """Note the records that arrived (waits for at least one)."""
                nonlocal behind
                for log, item in await reader.next_pairs():
                    if not isinstance(item, logstrand.Record):
                        continue
                    seen[log] += 1
                    if seen[log] == have:
                        behind -= 1
                    elif seen[log] > have and item.payload is not None:
                        late.append(time.time() - STAMP.unpack_from(item.payload)[0])

            with trio.fail_after(600):
                while behind:
                    await take()
            out["catch_up_s"] = time.perf_counter() - t0
            await trio.sleep(2.0)
            out["nodes_kib"] = (sum(rss_mb(p) for p in pids) - nodes0) * 1024 / len(logs)
            out["client_kib"] = (rss_mb(os.getpid()) - me0) * 1024 / len(logs)
            c0 = cpu_s(pids)
            await trio.sleep(3.0)
            out["idle_cpu"] = (cpu_s(pids) - c0) / 3.0 / len(pids) * 100
            ctx = multiprocessing.get_context("spawn")
            sent, spent, acked = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Value("d", 0.0)
            writer = ctx.Process(
                target=_write, args=(c.url, logs, rate, seconds, sent, spent, acked)
            )
            writer.start()
            while writer.is_alive():
                with trio.move_on_after(0.2):
                    await take()
            writer.join()
            total, took = sent.value, spent.value
            out["append_p50_ms"] = acked.value * 1000
            with trio.move_on_after(30):  # what is still on its way
                while len(late) < total:
                    await take()
    late.sort()
    out["offered_rps"] = rate
    out["sent_rps"] = total / took if took else 0.0
    out["delivered"] = len(late) / total if total else 0.0
    out["p50_ms"] = statistics.median(late) * 1000 if late else float("nan")
    out["p99_ms"] = late[max(0, int(len(late) * 0.99) - 1)] * 1000 if late else float("nan")
    return out


def tail(c: LocalCluster, logs: range, have: int, rate: float, seconds: float) -> dict[str, Any]:
    """Run the tail phase (see the module docstring) and return its figures."""
    return trio.run(_tail, c, logs, have, rate, seconds)

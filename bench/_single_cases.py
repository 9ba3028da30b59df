"""The cases of ``bench/single.py``, for any store: stdlib only, so the
Redis side runs them from the peers' virtualenv with the same code.

Each case takes plain callables: ``append()`` appends one record and waits
for it; threads each get their own ``append`` from ``make_append()`` (a
Redis connection each; logstrand's one client shared).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

PAYLOAD = b"x" * 100
Append = Callable[[], object]


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def threads(make_append: Callable[[], Append], count: int, per: int) -> float:
    """``count`` threads, each ``per`` appends in a loop: records/s."""
    appends = [make_append() for _ in range(count)]
    start = threading.Barrier(count + 1)

    def work(append: Append) -> None:
        start.wait()
        for _ in range(per):
            append()

    ts = [threading.Thread(target=work, args=(a,)) for a in appends]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return count * per / (time.perf_counter() - t0)


def sequential(append: Append, n: int) -> tuple[float, float]:
    """``n`` appends one after another: p50 and p99 in ms."""
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        append()
        lat.append((time.perf_counter() - t0) * 1000)
    return percentile(lat, 0.5), percentile(lat, 0.99)


def steady(
    make_append: Callable[[], Append], count: int, rate: float, seconds: float
) -> tuple[float, float]:
    """``count`` threads appending at ``rate`` records/s between them, each
    on its own schedule (a late thread does not catch up in a burst): the
    latency p50 and p99 in ms."""
    appends = [make_append() for _ in range(count)]
    every = count / rate
    lat: list[float] = []
    lock = threading.Lock()
    t_start = time.perf_counter() + 0.05

    def work(i: int, append: Append) -> None:
        mine = []
        due = t_start + every * i / count
        end = t_start + seconds
        while due < end:
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            t0 = time.perf_counter()
            append()
            mine.append((time.perf_counter() - t0) * 1000)
            due = max(due + every, time.perf_counter())
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=work, args=(i, a)) for i, a in enumerate(appends)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return percentile(lat, 0.5), percentile(lat, 0.99)

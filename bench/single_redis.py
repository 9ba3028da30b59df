"""Redis Streams through ``bench/single.py``'s cases (run by it, from the
peers' virtualenv ``.venv-peers``; prints one JSON object).

    .venv-peers/bin/python bench/single_redis.py --records 50000

The server is ``../shared/bench/peers.py``'s: redis-server on 127.0.0.1 and
a free port, AOF with appendfsync everysec, started and stopped here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent / "shared" / "bench")]

import peers  # noqa: E402
import redis  # noqa: E402
from _single_cases import PAYLOAD, sequential, steady, threads  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = peers.start_redis(tmp, "everysec")
        try:
            print(json.dumps(run(server.port, args.records, args.seconds)))
        finally:
            server.stop()


def run(port: int, records: int, seconds: float) -> dict[str, float]:
    def connect() -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)

    def make_append() -> Callable[[], object]:
        r = connect()
        return lambda: r.xadd("t", {"d": PAYLOAD})

    r = connect()
    for _ in range(100):
        try:
            r.ping()
            break
        except redis.exceptions.BusyLoadingError:
            time.sleep(0.1)
    out: dict[str, float] = {}
    out["p50_ms"], out["p99_ms"] = sequential(make_append(), 2000)
    t0 = time.perf_counter()
    pipe = r.pipeline(transaction=False)
    for _ in range(records):
        pipe.xadd("a", {"d": PAYLOAD})
    pipe.execute()
    out["append_async"] = records / (time.perf_counter() - t0)
    out["threads16"] = threads(make_append, 16, 300)
    out["threads64"] = threads(make_append, 64, 150)
    out["steady_p50_ms"], out["steady_p99_ms"] = steady(make_append, 8, 5000, seconds)
    return out


if __name__ == "__main__":
    main()

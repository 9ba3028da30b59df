"""Redis Streams through ``bench/kafka.py``'s workload (run by it, from the
peers' virtualenv ``.venv-peers``; prints one JSON object).

    .venv-peers/bin/python bench/kafka_redis.py --records 200000 --big 20000

The server is ``../shared/bench/peers.py``'s (AOF, appendfsync everysec);
appends are pipelines of 1,000 XADDs, backfills XRANGE pages of 1,000.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent / "shared" / "bench")]

import peers  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--big", type=int, default=20_000)
    args = ap.parse_args()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = peers.start_redis(tmp, "everysec")
        try:
            r = peers._redis(server.port)
            for _ in range(100):
                try:
                    r.ping()
                    break
                except Exception:
                    time.sleep(0.1)
            for name, n, size in (("100b", args.records, 100), ("10kib", args.big, 10240)):
                t0 = time.perf_counter()
                peers.r_append(r, name, n, size)
                out[f"produce_{name}"] = n / (time.perf_counter() - t0)
                t0 = time.perf_counter()
                got, _ = peers.r_backfill(r, name, n)
                out[f"consume_{name}"] = got / (time.perf_counter() - t0)
        finally:
            server.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Appends with idempotence on and off, in the same process, against the same cluster.

    python bench/idempotence.py [--records 100000] [--repeat 3] [--json out.json]

A local 3-node cluster (R=2).  Each round runs both settings one after the
other (on first in odd rounds, off first in even ones) on two cases:
- batching: ``append_batch`` calls of 1000 x 100 B, one after the other;
- coalescing: 16 trio tasks each calling ``append`` (100 B) in a loop.
Prints the medians of records/s per setting and the ratio on/off (the aim in
issue 20: at least 0.9).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from typing import Any

import trio
from append import concurrent_appenders, one_appender  # bench/ is on sys.path

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


async def _round(url: str, records: int, idempotent: bool) -> dict[str, float]:
    settings = logstrand.ClientSettings(idempotent=idempotent)
    async with logstrand.open_client(url, settings=settings) as client:
        await client.append(1, b"warm-up")
        return {
            "batch_100": await one_appender(client, 1, records, 100),
            "concurrent_100": await concurrent_appenders(client, 1, records // 5, 100),
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    runs: dict[str, dict[str, list[float]]] = {"on": {}, "off": {}}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(tmp) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        for r in range(args.repeat):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for mode in order:
                got = trio.run(_round, c.url, args.records, mode == "on")
                for case, rate in got.items():
                    runs[mode].setdefault(case, []).append(rate)
    out: dict[str, Any] = {"records": args.records, "repeat": args.repeat, "cases": {}}
    for case in runs["on"]:
        on = statistics.median(runs["on"][case])
        off = statistics.median(runs["off"][case])
        out["cases"][case] = {"on_rec_s": on, "off_rec_s": off, "ratio": on / off}
        print(f"{case:16} on {on:10,.0f} rec/s   off {off:10,.0f} rec/s   ratio {on / off:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()

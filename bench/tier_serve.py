"""A node's answers to ``TierRead`` with every block in its cache (the warm
path of bench/tier.py), in-process: the microseconds one 4 MiB answer costs
the node, with no network, client or object store in the way.

One object of 40,000 records of 10 KiB, read through whole, answer by
answer, once to fill the cache and then ``--rounds`` times; medians of
``--repeat``.

    .venv/bin/python bench/tier_serve.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import trio

from logstrand.batch import make_batch
from logstrand.tier import Batch, build
from logstrand.tier._serve import TierServer
from logstrand.types import compose_lsn
from logstrand.wire import TierRead

FIRST = compose_lsn(2, 1)
ANSWER_BYTES = 4 * 1024 * 1024


class _Objects:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def read(self, name: str, start: int, length: int) -> bytes:
        return self.objects[name][start : start + length]


class _Docs:
    def __init__(self, segment: list[Any]) -> None:
        self.segment = segment

    def trim_point(self, log: int) -> int:
        return 0

    def tier_state(self, log: int) -> tuple[int, list[list[Any]]]:
        return int(self.segment[1]), [self.segment]


class _AStore:
    def __init__(self, docs: _Docs) -> None:
        self.docs = docs

    async def run(self, fn: Any) -> Any:
        return fn(self.docs)


class _View:
    def __init__(self, docs: _Docs) -> None:
        self.astore = _AStore(docs)


def _server() -> tuple[TierServer, int, int]:
    entries: list[Batch] = []
    lsn = FIRST
    for _ in range(400):
        lsns = list(range(lsn, lsn + 100))
        packed = make_batch(lsns, [bytes(10240)] * 100, timestamps_ms=1)
        entries.append(Batch(packed.data, lsn, lsn + 99))
        lsn += 100
    built = build(entries, 40_000)
    objects = _Objects()
    objects.objects["o"] = built.data
    docs = _Docs([built.lo, built.hi, "o", len(built.data), built.crc, 40_000])
    return TierServer(objects, _View(docs), 2 << 30), built.hi, len(built.data)  # type: ignore[arg-type]


async def _through(server: TierServer, last: int) -> int:
    answers, start = 0, FIRST
    while start <= last:
        reply = await server.answer(TierRead(1, 1, start, last, ANSWER_BYTES))
        start = reply.next_lsn
        answers += 1
    return answers


def one_round(rounds: int) -> dict[str, float]:
    server, last, size = _server()

    async def main() -> dict[str, float]:
        await _through(server, last)  # the cache filled
        t0 = time.perf_counter()
        answers = sum([await _through(server, last) for _ in range(rounds)])
        took = time.perf_counter() - t0
        return {"us_per_answer": took / answers * 1e6, "MBps": rounds * size / took / 1e6}

    return trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runs = [one_round(args.rounds) for _ in range(args.repeat)]
    print(json.dumps({k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}))


if __name__ == "__main__":
    main()

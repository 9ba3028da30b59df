"""Coverage-guided fuzzing of a node's answers to ``TierRead`` over objects
that no honest offload wrote (atheris).

    .venv/bin/python tests/fuzz/fuzz_tier.py -max_total_time=60

The input's first bytes choose where a reader starts and how much it asks
for; the rest is the entries of one block, put under a correct CRC, index
and footer, so that what is fuzzed is what the CRC cannot catch: entries
and stored batches that were written wrong.  Every answer must be a
``TierReadReply`` whose items a reader can take in, and whatever the node
could not read must be a gap, never an exception nor a skip.
"""

from __future__ import annotations

import os
import struct
import sys

import atheris

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

with atheris.instrument_imports():
    import trio

    from logstrand.batch import crc32c
    from logstrand.client._tier_reads import items_of
    from logstrand.tier._format import _FOOTER, _ROW, FOOTER_MAGIC, MAGIC
    from logstrand.tier._serve import TierServer
    from logstrand.wire import TierRead, TierReadReply


class _Objects:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, name: str, start: int, length: int) -> bytes:
        return self.data[start : start + length]


class _Docs:
    def __init__(self, lo: int, hi: int, size: int) -> None:
        self.segments = [[lo, hi, "o", size, 0, 0]]
        self.point = hi

    def trim_point(self, log: int) -> int:
        return 0

    def tier_state(self, log: int) -> tuple[int, list[list[object]]]:
        return self.point, self.segments


class _AStore:
    def __init__(self, docs: _Docs) -> None:
        self.docs = docs

    async def run(self, fn: object) -> object:
        return fn(self.docs)  # type: ignore[operator]


class _View:
    def __init__(self, docs: _Docs) -> None:
        self.astore = _AStore(docs)


def _object(block: bytes, lo: int, hi: int) -> bytes:
    row = _ROW.pack(lo, hi, len(MAGIC), len(block), crc32c(block))
    at = len(MAGIC) + len(block)
    footer = _FOOTER.pack(at, len(row), crc32c(row), 1, lo, hi, FOOTER_MAGIC)
    return MAGIC + block + row + footer


def one_input(data: bytes) -> None:
    if len(data) < 8:
        return
    lo, span, ask = struct.unpack_from("<IHH", data)
    lo += 1
    hi = lo + span
    obj = _object(data[8:], lo, hi)
    docs = _Docs(lo, hi, len(obj))
    server = TierServer(_Objects(obj), _View(docs), cache_bytes=1 << 20)  # type: ignore[arg-type]

    async def main() -> None:
        start = lo + ask % (span + 1)
        reply = await server.answer(TierRead(1, 7, start, hi, 1 << 20))
        assert isinstance(reply, TierReadReply)
        assert reply.next_lsn > start
        items = items_of(reply)  # what a reader does with it
        covered = sorted(
            (i.lo, i.hi) if hasattr(i, "hi") else (i.lsns[0], i.lsns[-1]) for i in items
        )
        assert all(a <= b for a, b in covered)

    trio.run(main)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()

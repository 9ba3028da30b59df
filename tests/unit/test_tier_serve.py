"""A node's answers to ``TierRead`` (``tier/_serve.py``) over an object store
in memory: what an object holds comes back from any LSN, in as many reads
as it takes, and what cannot be read is a gap that says why."""

from __future__ import annotations

from typing import Any

import pytest

from logstrand.batch import make_batch
from logstrand.client._tier_reads import items_of
from logstrand.client._views import RecordRun
from logstrand.errors import Status
from logstrand.tier import Batch, GapEntry, build
from logstrand.tier._objects import ObjectMissing
from logstrand.tier._serve import BlockCache, TierServer
from logstrand.types import GapType, compose_lsn
from logstrand.wire import TierRead

L = compose_lsn(2, 1)


class _Objects:
    """An object store in memory (what ``TierServer`` calls of one)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.reads = 0

    def read(self, name: str, start: int, length: int) -> bytes:
        if name not in self.objects:
            raise ObjectMissing(name)
        self.reads += 1
        return self.objects[name][start : start + length]


class _Docs:
    def __init__(self) -> None:
        self.trim = 0
        self.point = 0
        self.segments: list[list[Any]] = []

    def trim_point(self, log: int) -> int:
        return self.trim

    def tier_state(self, log: int) -> tuple[int, list[list[Any]]]:
        return self.point, self.segments


class _AStore:
    def __init__(self, docs: _Docs) -> None:
        self.docs = docs

    async def run(self, fn: Any) -> Any:
        return fn(self.docs)


class _View:
    def __init__(self, docs: _Docs) -> None:
        self.astore = _AStore(docs)


def _segment(objects: _Objects, docs: _Docs, name: str, first: int, batches: int) -> None:
    entries: list[Batch | GapEntry] = []
    lsn = first
    for _ in range(batches):
        lsns = list(range(lsn, lsn + 100))
        packed = make_batch(lsns, [b"p%d" % x + bytes(500) for x in lsns], timestamps_ms=1)
        entries.append(Batch(packed.data, lsn, lsn + 99))
        lsn += 100
    built = build(entries, 100 * batches, block_bytes=16 * 1024)
    objects.objects[name] = built.data
    docs.segments.append([built.lo, built.hi, name, len(built.data), built.crc, 100 * batches])
    docs.point = built.hi


@pytest.fixture
def served() -> tuple[TierServer, _Objects, _Docs]:
    objects, docs = _Objects(), _Docs()
    _segment(objects, docs, "a", L, 30)
    _segment(objects, docs, "b", L + 3000, 30)
    return TierServer(objects, _View(docs), cache_bytes=8 << 20), objects, docs  # type: ignore[arg-type]


def _lsns(reply: Any) -> list[int]:
    return [x for item in items_of(reply) if isinstance(item, RecordRun) for x in item.lsns]


async def test_reads_from_any_lsn_follow_each_other_to_the_tiered_point(
    served: tuple[TierServer, _Objects, _Docs],
) -> None:
    server, objects, docs = served
    start, got = L + 1234, []
    while start <= docs.point:
        reply = await server.answer(TierRead(1, 7, start, 2**63, 64 * 1024))
        assert reply.status == Status.OK
        assert reply.tier_point == docs.point
        assert reply.next_lsn > start
        got += _lsns(reply)
        start = reply.next_lsn
    assert got == list(range(L + 1234, docs.point + 1))
    # Read again: every block comes from the cache, not the store.
    reads = objects.reads
    reply = await server.answer(TierRead(2, 7, L + 1234, 2**63, 64 * 1024))
    assert objects.reads == reads
    assert server.cache.hits > 0
    assert _lsns(reply)[0] == L + 1234


async def test_until_cuts_the_answer(served: tuple[TierServer, _Objects, _Docs]) -> None:
    server, _, _ = served
    reply = await server.answer(TierRead(1, 7, L, L + 149, 1 << 20))
    assert _lsns(reply) == list(range(L, L + 150))
    assert reply.next_lsn == L + 150


async def test_a_missing_object_is_dataloss_over_its_segment_and_reading_goes_on(
    served: tuple[TierServer, _Objects, _Docs],
) -> None:
    server, objects, _docs = served
    del objects.objects["a"]
    reply = await server.answer(TierRead(1, 7, L + 10, 2**63, 1 << 20))
    (gap,) = items_of(reply)
    assert (gap.type, gap.lo, gap.hi) == (GapType.DATALOSS, L + 10, L + 2999)  # type: ignore[union-attr]
    reply = await server.answer(TierRead(2, 7, reply.next_lsn, 2**63, 1 << 20))
    assert _lsns(reply)[0] == L + 3000


async def test_a_corrupt_object_is_a_checksum_gap(
    served: tuple[TierServer, _Objects, _Docs],
) -> None:
    server, objects, _ = served
    data = bytearray(objects.objects["b"])
    data[200] ^= 1
    objects.objects["b"] = bytes(data)
    reply = await server.answer(TierRead(1, 7, L + 3000, 2**63, 1 << 20))
    (gap,) = items_of(reply)
    assert gap.type == GapType.CHECKSUM_FAIL  # type: ignore[union-attr]


async def test_below_the_trim_point_is_a_trim_gap(
    served: tuple[TierServer, _Objects, _Docs],
) -> None:
    server, _, docs = served
    docs.trim = L + 499
    reply = await server.answer(TierRead(1, 7, L, 2**63, 1 << 20))
    (gap,) = items_of(reply)
    assert (gap.type, gap.lo, gap.hi, reply.next_lsn) == (GapType.TRIM, L, L + 499, L + 500)  # type: ignore[union-attr]


def test_the_block_cache_keeps_its_bound_and_the_recent_blocks() -> None:
    cache = BlockCache(250)
    for i in range(5):
        cache.put(("o", i), bytes(100))
        cache.get(("o", 0))  # keep using block 0
    assert cache.bytes <= 250
    assert cache.get(("o", 0)) is not None
    assert cache.get(("o", 1)) is None
    cache.put(("o", 9), bytes(300))  # larger than the cache: not kept
    assert cache.get(("o", 9)) is None


@pytest.mark.parametrize(
    ("start", "until", "max_bytes", "why"),
    [
        (10, 9, 1024, "start_lsn past until_lsn"),
        (1, 9, 0, "max_bytes"),
        (1, 9, (16 << 20) + 1, "max_bytes"),
    ],
)
def test_a_tier_read_that_makes_no_sense_is_refused_off_the_wire(
    start: int, until: int, max_bytes: int, why: str
) -> None:
    import cbor2

    from logstrand.errors import ProtocolError
    from logstrand.wire import decode_body

    raw = cbor2.dumps([TierRead.TYPE_ID, 1, 7, start, until, max_bytes])
    with pytest.raises(ProtocolError, match=why):
        decode_body(raw)


async def test_a_reader_past_the_kept_tiered_point_reads_it_again() -> None:
    """A reader sent by a node's local floor knows of a tiered point newer
    than the one this node keeps: the node reads the record again rather
    than answer "nothing there", and a cache too small for a block still
    answers."""
    objects, docs = _Objects(), _Docs()
    _segment(objects, docs, "a", L, 30)
    server = TierServer(objects, _View(docs), cache_bytes=0)  # type: ignore[arg-type]
    reply = await server.answer(TierRead(1, 7, L, 2**63, 64 * 1024))
    assert _lsns(reply)[0] == L
    _segment(objects, docs, "b", L + 3000, 30)  # recorded since: the kept state is stale
    reply = await server.answer(TierRead(2, 7, L + 3000, 2**63, 64 * 1024))
    assert reply.status == Status.OK
    assert reply.tier_point == docs.point
    assert _lsns(reply)[0] == L + 3000
    assert reply.next_lsn > L + 3000


async def test_nothing_below_e1n1_is_called_trimmed() -> None:
    """A read from LSN 1 (Spark's ranges start there) gets the first
    records, not a TRIM gap over the LSNs no log can hold: Spark's source
    failed its query on that gap."""
    objects, docs = _Objects(), _Docs()
    first = compose_lsn(1, 1)
    _segment(objects, docs, "a", first, 2)
    server = TierServer(objects, _View(docs), cache_bytes=1 << 20)  # type: ignore[arg-type]
    reply = await server.answer(TierRead(1, 7, 1, 2**63, 1 << 20))
    assert list(reply.gaps) == []
    assert _lsns(reply) == list(range(first, first + 200))

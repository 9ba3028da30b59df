"""The tiered object's format (``tier/_format.py``): what goes in comes
back from any LSN, and damage anywhere is found, never read past."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.batch import make_batch
from logstrand.tier import (
    Batch,
    CorruptObject,
    GapEntry,
    build,
    entries_from,
    parse_block,
    parse_footer,
    parse_index,
)
from logstrand.tier._format import FOOTER_BYTES, MAGIC, blocks_from
from logstrand.types import GapType, compose_lsn


def _batch(first: int, n: int) -> Batch:
    lsns = list(range(first, first + n))
    packed = make_batch(
        lsns,
        [b"v%d" % i for i in lsns],
        timestamps_ms=[1_000 + i for i in range(n)],
        keys=[b"k"] * n,
    )
    return Batch(packed.data, first, first + n - 1)


def _entries(runs: list[int]) -> list[Batch | GapEntry]:
    """Batches of ``runs`` records, a BRIDGE after every third."""
    out: list[Batch | GapEntry] = []
    lsn = compose_lsn(1, 1)
    for i, n in enumerate(runs):
        out.append(_batch(lsn, n))
        lsn += n
        if i % 3 == 2:
            out.append(GapEntry(GapType.BRIDGE, lsn, lsn + 9))
            lsn += 10
    return out


def _read_all(data: bytes, start: int) -> list[Batch | GapEntry]:
    footer = parse_footer(data[-FOOTER_BYTES:], len(data))
    index = parse_index(
        data[footer.index_offset : footer.index_offset + footer.index_length], footer
    )
    got: list[Batch | GapEntry] = []
    for row in index[blocks_from(index, start) :]:
        got += parse_block(data[row.offset : row.offset + row.length], row)
    return entries_from(got, start)


@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(64, 4096), st.data())
def test_entries_come_back_from_any_lsn(runs: list[int], block: int, data: st.DataObject) -> None:
    entries = _entries(runs)
    built = build(entries, sum(runs), block_bytes=block)
    assert (built.lo, built.hi) == (entries[0].lo, entries[-1].hi)
    start = data.draw(st.integers(built.lo, built.hi))
    got = _read_all(built.data, start)
    assert got == entries_from(entries, start)
    assert got[0].lo == start


def test_a_flipped_byte_anywhere_a_reader_reads_is_found() -> None:
    """Every byte but the leading magic (which names the file for people
    and tools; a reader seeks past it) is under a CRC or checked against
    the footer."""
    built = build(_entries([5, 7, 9, 3]), 24, block_bytes=100)
    for at in range(len(MAGIC), len(built.data)):
        damaged = bytearray(built.data)
        damaged[at] ^= 0x40
        with pytest.raises(CorruptObject):
            _read_all(bytes(damaged), built.lo)


def test_a_cut_object_is_no_object() -> None:
    built = build(_entries([5, 7]), 12)
    with pytest.raises(CorruptObject, match="footer"):
        _read_all(built.data[:-1], built.lo)
    with pytest.raises(CorruptObject):
        _read_all(built.data[:-FOOTER_BYTES], built.lo)


def test_entries_must_cover_their_range_without_a_hole() -> None:
    a, b = _batch(compose_lsn(1, 1), 3), _batch(compose_lsn(1, 5), 3)
    with pytest.raises(ValueError, match="follow each other"):
        build([a, b], 6)
    with pytest.raises(ValueError, match="at least one"):
        build([], 0)

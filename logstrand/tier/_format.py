"""The format of a tiered object: one log's records over an LSN range, as a
reader of the log got them, in blocks that a reader can seek to.  Pure.

Layout
------
::

    "LSTIER1\\n"                       8 bytes: what the object is
    block, block, ...                 each a run of entries
    index                             one row per block
    footer                            32 bytes, at the very end

An **entry** is a stored packed batch (``batch.PackedBatch``, its own
checksums inside) with the LSN window [lo, hi] of it that the log delivers,
or a gap (type, lo, hi) as the reader met it (a BRIDGE at an epoch's end,
a HOLE, a COMPACTED range).  Entries are in LSN order and cover the
object's range without a hole, so a reader of the object sees exactly what
a reader of the log saw: the same records, markers and gaps.

A **block** is the entries up to about ``BLOCK_BYTES``; the index row of a
block says its first and last LSN, where it starts, its length and its
CRC-32C.  A reader reads the footer (one ranged GET of its last bytes), the
index, and then only the blocks from the LSN it wants: a seek costs three
small reads, whatever the object's size.

The **footer** holds the index's offset, length and CRC-32C, the blocks'
count and the object's LSN range, and a second magic.  Every read is
checked: a block or an index that does not match its CRC, a footer that is
not one, is ``CorruptObject``; a reader turns it into a CHECKSUM_FAIL gap
over what it could not read, never into a silent skip.
"""

from __future__ import annotations

import bisect
import struct
from typing import TYPE_CHECKING

import attrs

from ..batch import crc32c
from ..types import GapType

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

MAGIC = b"LSTIER1\n"
FOOTER_MAGIC = b"LSTIDX1\n"
#: Entries are cut into blocks of about this many bytes: a reader's unit.
BLOCK_BYTES = 1024 * 1024

_ENTRY = struct.Struct("<BQQI")  # kind, lo, hi, payload length
_ROW = struct.Struct("<QQQII")  # first LSN, last LSN, offset, length, crc32c
_FOOTER = struct.Struct("<QIIIQQ8s")  # index offset, length, crc, blocks, lo, hi, magic
FOOTER_BYTES = _FOOTER.size

_BATCH = 1
_GAP = 2


class CorruptObject(Exception):
    """A tiered object, or a part of one, that does not check out."""


@attrs.frozen
class Batch:
    """A stored packed batch (its bytes) and the window of it delivered."""

    data: bytes
    lo: int
    hi: int


@attrs.frozen
class GapEntry:
    type: GapType
    lo: int
    hi: int


Entry = Batch | GapEntry


@attrs.frozen
class Block:
    """An index row: where a block is and what it covers."""

    first: int
    last: int
    offset: int
    length: int
    crc: int


@attrs.frozen
class Footer:
    index_offset: int
    index_length: int
    index_crc: int
    blocks: int
    lo: int
    hi: int


@attrs.frozen
class Built:
    """An object made by ``build``, with what the metadata records of it."""

    data: bytes
    lo: int
    hi: int
    records: int
    #: CRC-32C of the whole object: what the metadata keeps, and what an
    #: upload that is read back must match.
    crc: int


def _entry_bytes(entry: Entry) -> bytes:
    if isinstance(entry, Batch):
        return _ENTRY.pack(_BATCH, entry.lo, entry.hi, len(entry.data)) + entry.data
    return _ENTRY.pack(_GAP, entry.lo, entry.hi, 1) + bytes((int(entry.type),))


def build(entries: Sequence[Entry], records: int, block_bytes: int = BLOCK_BYTES) -> Built:
    """The object of ``entries`` (in LSN order, without a hole between
    them; ``records``: how many records their windows hold)."""
    if not entries:
        raise ValueError("an object holds at least one entry")
    _check_order(entries)
    parts = [MAGIC]
    at = len(MAGIC)
    rows: list[bytes] = []
    block: list[bytes] = []
    first = entries[0].lo
    size = 0
    for i, entry in enumerate(entries):
        raw = _entry_bytes(entry)
        block.append(raw)
        size += len(raw)
        last_one = i == len(entries) - 1
        if size >= block_bytes or last_one:
            data = b"".join(block)
            rows.append(_ROW.pack(first, entry.hi, at, len(data), crc32c(data)))
            parts.append(data)
            at += len(data)
            block, size = [], 0
            if not last_one:
                first = entries[i + 1].lo
    index = b"".join(rows)
    lo, hi = entries[0].lo, entries[-1].hi
    footer = _FOOTER.pack(at, len(index), crc32c(index), len(rows), lo, hi, FOOTER_MAGIC)
    data = b"".join([*parts, index, footer])
    return Built(data, lo, hi, records, crc32c(data))


def _check_order(entries: Sequence[Entry]) -> None:
    prev = entries[0].lo - 1
    for e in entries:
        if e.lo != prev + 1 or e.hi < e.lo:
            raise ValueError(f"entries must follow each other: [{e.lo}, {e.hi}] after {prev}")
        prev = e.hi


def parse_footer(tail: bytes, size: int) -> Footer:
    """The footer from an object's last ``FOOTER_BYTES`` (``size``: the
    object's length, which the index must fit in)."""
    if len(tail) != FOOTER_BYTES:
        raise CorruptObject(f"a footer is {FOOTER_BYTES} bytes, not {len(tail)}")
    offset, length, crc, blocks, lo, hi, magic = _FOOTER.unpack(tail)
    if magic != FOOTER_MAGIC:
        raise CorruptObject("no tiered object's footer at its end")
    if (
        offset < len(MAGIC)
        or offset + length + FOOTER_BYTES != size
        or length != blocks * _ROW.size
    ):
        raise CorruptObject("the footer's index does not fit the object")
    return Footer(offset, length, crc, blocks, lo, hi)


def parse_index(data: bytes, footer: Footer) -> list[Block]:
    """The index rows, checked against the footer."""
    if len(data) != footer.index_length or crc32c(data) != footer.index_crc:
        raise CorruptObject("the index fails its checksum")
    rows = [Block(*_ROW.unpack_from(data, i)) for i in range(0, len(data), _ROW.size)]
    at = len(MAGIC)
    for row in rows:
        if row.offset != at or row.first > row.last:
            raise CorruptObject("the index's blocks do not follow each other")
        at += row.length
    if at != footer.index_offset or rows[0].first != footer.lo or rows[-1].last != footer.hi:
        raise CorruptObject("the index does not cover the object")
    return rows


def blocks_from(index: Sequence[Block], lsn: int) -> int:
    """The position in ``index`` of the block that holds ``lsn`` (or the
    first after it)."""
    return bisect.bisect_left([b.last for b in index], lsn)


def parse_block(data: bytes, row: Block) -> list[Entry]:
    """The entries of one block, checked against its index row."""
    if len(data) != row.length or crc32c(data) != row.crc:
        raise CorruptObject(f"the block of LSNs {row.first}..{row.last} fails its checksum")
    out: list[Entry] = []
    at = 0
    while at < len(data):
        if at + _ENTRY.size > len(data):
            raise CorruptObject("an entry runs past its block")
        kind, lo, hi, n = _ENTRY.unpack_from(data, at)
        at += _ENTRY.size
        payload = data[at : at + n]
        at += n
        if len(payload) != n or lo > hi:
            raise CorruptObject("an entry runs past its block")
        if kind == _BATCH:
            out.append(Batch(payload, lo, hi))
        elif kind == _GAP and n == 1:
            try:
                out.append(GapEntry(GapType(payload[0]), lo, hi))
            except ValueError as exc:
                raise CorruptObject(f"a gap of no known type {payload[0]}") from exc
        else:
            raise CorruptObject(f"an entry of no known kind {kind}")
    return out


def entries_from(entries: Iterable[Entry], lsn: int) -> list[Entry]:
    """``entries`` from ``lsn`` on, the first one cut to start there."""
    out: list[Entry] = []
    for e in entries:
        if e.hi < lsn:
            continue
        if e.lo < lsn:
            e = attrs.evolve(e, lo=lsn)
        out.append(e)
    return out

"""The packed batch: one run of records of a log as one value, the unit that
the client appends, a STORE carries, LogsDB keeps and a read stream sends.
Pure: no I/O, no numpy (``memoryview`` casts read the columns).

A client packs the keys and payloads of an append into a *body* and computes
its crc32c (after compression, when the log compresses).  The sequencer
stamps a *header* in front of it (first LSN, timestamp, wave, copyset) without
looking inside the body; a storage node checks both checksums and stores the
bytes as they came; a read stream sends them as they are stored; the reader
checks both checksums again and only then decompresses.  A copy whose bytes
changed anywhere on that way fails a check and is never delivered as data.

Layout (little-endian, columns 8-byte aligned so that numpy can view them)::

    0  u16 format (2)        2  u8 codec        3  u8 layout bits
    4  u32 count             8  u64 first_lsn   16 u64 timestamp_ms
    24 u32 wave              28 u16 flags       30 u8 copyset_len  31 u8 0
    32 u32 body_len          36 u32 raw_len     40 u32 body_crc    44 u32 header_crc
    48 u32 copyset[copyset_len], zero-padded to 8
       u64 producer_id, u64 seq  (layout bit PRODUCER: an idempotent append's
                                  producer and the number of its first record)
       u64 lsn[count]            (layout bit LSNS; else first_lsn + i)
       u64 timestamp_ms[count]   (bit TIMESTAMPS; else all timestamp_ms)
       u16 flags[count], padded  (bit FLAGS; else all ``flags``)
    body (body_len bytes, covered by body_crc):
       i32 key_len[count]        (-1: no key)
       i32 payload_len[count]    (-1: tombstone)
       i32 extra_len[count]      (layout bit EXTRAS; -1: none)
       blob: keys, payloads, then extras (``_extras``), concatenated;
             compressed with ``codec`` (raw_len bytes once decompressed)

``header_crc`` covers bytes 0..44 and everything from 48 up to the body.  The
lengths stay outside the compressed blob: sequencers and nodes check record
sizes without decompressing anything.
"""

from __future__ import annotations

import itertools
import sys

from ..errors import ProtocolError
from ._build import Building, Columns
from ._compression import Codec, decompress, slices
from ._layout import (
    CRC_AT,
    EXTRAS,
    FLAGS,
    FORMAT,
    HEAD,
    HEAD_BYTES,
    LAYOUT_ALL,
    LSNS,
    PRODUCER,
    PRODUCER_FIELDS,
    TIMESTAMPS,
    check_lengths,
    check_size,
    crc32c,
    crc_extend,
    pad8,
    payload_bytes_of,
)

if sys.byteorder != "little":  # pragma: no cover - every supported platform is
    raise ImportError("logstrand's packed batches need a little-endian machine")


class PackedBatch(Building):
    """One packed batch (see the module docstring), parsed and checked.

    ``parse`` checks the structure and the header checksum; ``body_ok`` the
    body checksum.  Columns are read on demand and cached.
    """

    __slots__ = (
        "_blob",
        "_lens",
        "body_crc",
        "body_start",
        "codec",
        "copyset",
        "count",
        "data",
        "first_lsn",
        "flags0",
        "last_lsn",
        "layout",
        "payload_bytes",
        "producer",
        "raw_len",
        "timestamp_ms",
        "wave",
    )

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return (
            f"PackedBatch({self.count} records, lsn {self.first_lsn:#x}..{self.last_lsn:#x},"
            f" wave {self.wave}, copyset {self.copyset}, codec {self.codec})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PackedBatch) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    # -- reading --------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes) -> PackedBatch:
        """Check and parse packed bytes (everything but the body checksum).

        Raises:
            ProtocolError: truncated, inconsistent, an unknown format or codec,
                or the header checksum fails.
        """
        if type(data) is not bytes:
            data = bytes(data)
        if len(data) < HEAD_BYTES:
            raise ProtocolError("packed batch shorter than its header")
        (fmt, codec, layout, count, first, ts, wave, flags0, ncs, body_len, raw_len, bcrc, hcrc) = (
            HEAD.unpack_from(data, 0)
        )
        _check_head(fmt, codec, layout, count, raw_len)
        body_start, producer = _body_start(data, layout, count, ncs)
        columns = 3 if layout & EXTRAS else 2
        if len(data) != body_start + body_len or body_len < 4 * columns * count:
            raise ProtocolError("packed batch length disagrees with its header")
        crc = crc_extend(crc32c(data[:CRC_AT]), data[HEAD_BYTES:body_start])
        if crc != hcrc:
            raise ProtocolError(f"packed batch header checksum mismatch at lsn {first:#x}")
        b = cls.__new__(cls)
        b.data = data
        b.count = count
        b.first_lsn = first
        b.timestamp_ms = ts
        b.wave = wave
        b.flags0 = flags0
        b.codec = codec
        b.layout = layout
        b.copyset = tuple(memoryview(data)[HEAD_BYTES : HEAD_BYTES + 4 * ncs].cast("I").tolist())
        b.body_start = body_start
        b.raw_len = raw_len
        b.body_crc = bcrc
        b.producer = producer
        b._blob = None
        b._lens = check_lengths(data, body_start, columns * count, raw_len)
        b.payload_bytes = payload_bytes_of(b._lens, count)
        if layout & LSNS:
            lsns = b.lsns()
            if any(x >= y for x, y in itertools.pairwise(lsns)) or lsns[0] != first:
                raise ProtocolError("packed batch LSNs are not increasing")
            b.last_lsn = lsns[-1]
        else:
            b.last_lsn = first + count - 1
        if b.last_lsn >= 1 << 64:
            raise ProtocolError("packed batch LSNs overflow")
        return b

    def body_ok(self) -> bool:
        """Does the body match the checksum its writer computed?"""
        return bool(crc32c(self.data[self.body_start :]) == self.body_crc)

    def column_at(self, bit: int) -> int:
        """Where the column of ``bit`` starts."""
        off = HEAD_BYTES + pad8(4 * len(self.copyset))
        if self.layout & PRODUCER:
            off += 16
        for b, width in ((LSNS, 8), (TIMESTAMPS, 8)):
            if b == bit:
                return off
            if self.layout & b:
                off += width * self.count
        return off

    def lsns(self) -> list[int]:
        if not self.layout & LSNS:
            return list(range(self.first_lsn, self.first_lsn + self.count))
        at = self.column_at(LSNS)
        return memoryview(self.data)[at : at + 8 * self.count].cast("Q").tolist()

    def timestamps(self) -> list[int]:
        if not self.layout & TIMESTAMPS:
            return [self.timestamp_ms] * self.count
        at = self.column_at(TIMESTAMPS)
        return memoryview(self.data)[at : at + 8 * self.count].cast("Q").tolist()

    def flags(self) -> list[int]:
        if not self.layout & FLAGS:
            return [self.flags0] * self.count
        at = self.column_at(FLAGS)
        return memoryview(self.data)[at : at + 2 * self.count].cast("H").tolist()

    @property
    def flag_bits(self) -> int:
        """Every record's flags, OR-ed."""
        if not self.layout & FLAGS:
            return self.flags0
        out = 0
        for f in set(self.flags()):
            out |= f
        return out

    def key_lens(self) -> list[int]:
        assert self._lens is not None
        return self._lens[: self.count]

    def lengths_table(self) -> memoryview:
        """The lengths table as stored: every key's, then every payload's
        (then every extras') length, int32 little-endian (-1: none), in the
        order ``blob`` holds them (the values of ``key_lens`` and the others)."""
        assert self._lens is not None
        at = self.body_start
        return memoryview(self.data)[at : at + 4 * len(self._lens)]

    def payload_lens(self) -> list[int]:
        assert self._lens is not None
        return self._lens[self.count : 2 * self.count]

    def extra_lens(self) -> list[int] | None:
        """Every record's extras length (-1: none); None: the batch has none."""
        assert self._lens is not None
        return self._lens[2 * self.count :] if self.layout & EXTRAS else None

    def blob(self) -> tuple[bytes, int]:
        """Where the keys and payloads lie, concatenated and decompressed: a
        buffer and the offset of the first byte.  Uncompressed, that is the
        batch's own bytes (no copy); else the decompressed blob (kept)."""
        at = self.body_start + (12 if self.layout & EXTRAS else 8) * self.count
        if self.codec == Codec.NONE:
            return self.data, at
        if self._blob is None:
            self._blob = decompress(self.codec, self.data[at:], self.raw_len)
        return self._blob, 0

    def keys_payloads(self) -> tuple[list[bytes | None], list[bytes | None]]:
        """Every record's key and payload (None: no key, a tombstone)."""
        blob, at = self.blob()
        n = self.count
        assert self._lens is not None
        keys, at = slices(blob, self._lens[:n], at)
        payloads, _ = slices(blob, self._lens[n : 2 * n], at)
        return keys, payloads

    def extras(self) -> list[bytes | None] | None:
        """Every record's extras (``_extras``; None: none), or None when the
        batch has no extras at all."""
        if not self.layout & EXTRAS:
            return None
        blob, at = self.blob()
        assert self._lens is not None
        at += sum(n for n in self._lens[: 2 * self.count] if n > 0)
        return slices(blob, self._lens[2 * self.count :], at)[0]

    def columns(self) -> Columns:
        """Every record as columns (decompresses the body when it is compressed)."""
        keys, payloads = self.keys_payloads()
        return Columns(self.lsns(), self.timestamps(), self.flags(), keys, payloads, self.extras())


def _check_head(fmt: int, codec: int, layout: int, count: int, raw_len: int) -> None:
    if fmt != FORMAT:
        raise ProtocolError(f"packed batch format {fmt} is not {FORMAT}")
    if codec not in Codec._value2member_map_:
        raise ProtocolError(f"packed batch codec {codec} unknown")
    if layout & ~LAYOUT_ALL:
        raise ProtocolError(f"packed batch layout bits {layout:#x} unknown")
    check_size(count, raw_len)


def _body_start(
    data: bytes, layout: int, count: int, ncs: int
) -> tuple[int, tuple[int, int] | None]:
    """Where the body starts, past the copyset and the columns the layout
    says are there; and the producer fields, when present."""
    body_start = HEAD_BYTES + pad8(4 * ncs)
    producer = None
    if layout & PRODUCER:
        if len(data) >= body_start + 16:
            producer = PRODUCER_FIELDS.unpack_from(data, body_start)
        body_start += 16
    if layout & LSNS:
        body_start += 8 * count
    if layout & TIMESTAMPS:
        body_start += 8 * count
    if layout & FLAGS:
        body_start += pad8(2 * count)
    return body_start, producer


#: Byte values with the top bit set: the last byte of a negative 32-bit length.
def last_lsn_of(data: bytes) -> int:
    """The last LSN a packed batch claims, from its header alone (unchecked:
    to pass over a batch without parsing it)."""
    if len(data) < HEAD_BYTES:
        return 0
    layout, count = data[3], int.from_bytes(data[4:8], "little")
    first = int.from_bytes(data[8:16], "little")
    if not layout & LSNS or count == 0:
        return first + count - 1
    at = HEAD_BYTES + pad8(4 * data[30]) + 8 * (count - 1) + (16 if layout & PRODUCER else 0)
    return int.from_bytes(data[at : at + 8], "little")

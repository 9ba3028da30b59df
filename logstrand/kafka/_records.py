"""Kafka's RecordBatch v2 (magic 2): the format, and decoding what
producers send (``_records_encode`` encodes what consumers fetch).  Pure.

A batch is a 61-byte header (base offset, length, leader epoch, magic, a
CRC-32C of everything after the CRC, attributes, last offset delta, first
and max timestamps, producer id, epoch and base sequence, record count) and
then its records, compressed as a whole when the attributes say so.  Each
record is varint-framed: attributes, timestamp and offset deltas, key,
value and headers.

Producers' batches are checked (magic, length, CRC, count) before anything
of them is stored: a batch that does not check out is CORRUPT_MESSAGE and
nothing of its request's partition is appended.

What decoding a partition's records may cost is bounded by ``room``: the
bytes of the records once decompressed plus ``RECORD_BYTES`` for each
record (its slots in the columns and its extras).  Decompression stops at
what is left of it (a kilobyte of zstd can hold a gigabyte of empty
records), and past it decoding raises ``TooLarge``.  The front sizes
``room`` from its budget for decoded requests (``_server``, ``_data``).
"""

from __future__ import annotations

import struct
import zlib

import attrs
import google_crc32c

from ..batch import pack_extra
from ._codec import KafkaDecodeError, read_varint
from ._inflate import CODECS, TooLarge, decompress

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = _HEADER.size  # 61
#: Where the CRC's span starts: after base offset, length, leader epoch, magic, crc.
_CRC_FROM = 21
_LENGTH_FROM = 12  # batch length counts from the leader epoch on

COMPRESSION_MASK = 0x07
TRANSACTIONAL = 0x10
CONTROL = 0x20


#: What a decoded record costs besides its bytes (see the module docstring).
RECORD_BYTES = 96
#: The most one request's records of one partition may decode into.
RECORDS_ROOM_MAX = 64 * 1024 * 1024


class _Room:
    """What is left of the room a decoding was given."""

    __slots__ = ("given", "left")

    def __init__(self, given: int) -> None:
        self.given = self.left = given

    def take(self, n: int, what: str) -> None:
        if n > self.left:
            raise TooLarge(f"{what}: more than the {self.given} bytes these records may take")
        self.left -= n


@attrs.frozen
class KafkaRecord:
    offset_delta: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@attrs.frozen
class KafkaBatch:
    base_offset: int
    attributes: int
    last_offset_delta: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    #: The records' keys, values and extras (headers and create time,
    #: ``batch.pack_extra``): what an append needs, decoded without an
    #: object per record.
    keys: list[bytes | None]
    values: list[bytes | None]
    extras: list[bytes | None]
    #: The decompressed records, for ``records``; or the records themselves.
    body: bytes = b""
    decoded: tuple[KafkaRecord, ...] | None = None
    #: What it takes decoded (the module docstring's ``room``).
    cost: int = 0

    @property
    def records(self) -> tuple[KafkaRecord, ...]:
        """Every record with its deltas and headers (decoded again: for tests
        and tools, not for the append path)."""
        if self.decoded is not None:
            return self.decoded
        out = []
        pos = 0
        for _ in range(len(self.keys)):
            rec, pos = _record(self.body, pos, self.first_timestamp_ms)
            out.append(rec)
        return tuple(out)

    @property
    def codec(self) -> str:
        return CODECS.get(self.attributes & COMPRESSION_MASK, "unknown")

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL)


def _bytes_field(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise KafkaDecodeError("record field runs past the batch")
    return bytes(buf[pos : pos + n]), pos + n


def _record(buf: bytes, pos: int, first_ts: int) -> tuple[KafkaRecord, int]:
    size, pos = read_varint(buf, pos)
    end = pos + size
    if size < 0 or end > len(buf):
        raise KafkaDecodeError("record runs past the batch")
    pos += 1  # attributes: unused
    ts_delta, pos = read_varint(buf, pos)
    offset_delta, pos = read_varint(buf, pos)
    key, pos = _bytes_field(buf, pos)
    value, pos = _bytes_field(buf, pos)
    count, pos = read_varint(buf, pos)
    if count < 0 or count > end - pos:
        raise KafkaDecodeError(f"record with {count} headers")
    headers = []
    for _ in range(count):
        hkey, pos = _bytes_field(buf, pos)
        hvalue, pos = _bytes_field(buf, pos)
        if hkey is None:
            raise KafkaDecodeError("header without a key")
        try:
            headers.append((hkey.decode(), hvalue))
        except UnicodeDecodeError as exc:
            raise KafkaDecodeError("header key is not UTF-8") from exc
    if pos != end:
        raise KafkaDecodeError("record length does not match its fields")
    return KafkaRecord(offset_delta, first_ts + ts_delta, key, value, tuple(headers)), end


_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


def _legacy(data: bytes, pos: int, records: list[KafkaRecord], room: _Room, depth: int = 0) -> int:
    """One message of the message sets older than v2 (magic 0 and 1, which
    Produce v0-v2 carry); a compressed one holds a whole inner set in its
    value.  Appends its records; returns where the next message starts."""
    if pos + _LEGACY.size > len(data):
        raise KafkaDecodeError("truncated message")
    _offset, size, crc, magic, attributes = _LEGACY.unpack_from(data, pos)
    end: int = pos + 12 + size
    if size < 6 or end > len(data):
        raise KafkaDecodeError("message size runs past the request")
    if zlib.crc32(data[pos + 16 : end]) != crc:
        raise KafkaDecodeError("message CRC does not match")
    at = pos + 18
    ts = -1
    if magic == 1:
        (ts,) = struct.unpack_from(">q", data, at)
        at += 8
    elif magic != 0:
        raise KafkaDecodeError(f"message magic {magic}")
    key, at = _int32_bytes(data, at, end)
    value, at = _int32_bytes(data, at, end)
    codec = attributes & COMPRESSION_MASK
    if codec == 0:
        room.take(end - pos + RECORD_BYTES, "a message set")
        records.append(KafkaRecord(len(records), ts, key, value))
        return end
    if depth or value is None:
        raise KafkaDecodeError("a compressed message inside a compressed one")
    inner = decompress(codec, value, room.left)
    ipos = 0
    while ipos < len(inner):
        ipos = _legacy(inner, ipos, records, room, depth + 1)
    return end


def _int32_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise KafkaDecodeError("truncated message field")
    (n,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise KafkaDecodeError("message field runs past the message")
    return bytes(data[pos : pos + n]), pos + n


def decode_message_set(data: bytes, room: int = RECORDS_ROOM_MAX) -> KafkaBatch:
    """The records of a message set older than v2 (Produce v0-v2), checked."""
    records: list[KafkaRecord] = []
    pos = 0
    left = _Room(room)
    while pos < len(data):
        pos = _legacy(data, pos, records, left)
    keys = [r.key for r in records]
    values = [r.value for r in records]
    extras = [pack_extra(r.timestamp_ms if r.timestamp_ms >= 0 else None) for r in records]
    last = max(0, len(records) - 1)
    fields = (0, 0, last, 0, 0, -1, -1, -1, keys, values, extras)
    return KafkaBatch(*fields, decoded=tuple(records), cost=left.given - left.left)


def _columns(
    body: bytes, count: int, first_ts: int
) -> tuple[list[bytes | None], list[bytes | None], list[bytes | None]]:
    """Keys, values and extras (headers and create time, ``batch.pack_extra``)
    of ``count`` records, every record's length checked.  The append path's
    decoder: a varint of one byte (the usual length of a delta or a small
    length) is read in place, longer ones by ``read_varint``; a record with
    headers is decoded again whole (``_record``)."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    extras: list[bytes | None] = []
    pos = 0
    try:
        for _ in range(count):
            b = body[pos]
            if b < 0x80:
                size, at = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, at = read_varint(body, pos)
            end = at + size
            if size < 5 or end > len(body):
                raise KafkaDecodeError("record length runs past the batch")
            p = at + 1  # attributes
            b = body[p]
            if b < 0x80:
                ts, p = first_ts + ((b >> 1) ^ -(b & 1)), p + 1
            else:
                delta, p = read_varint(body, p)
                ts = first_ts + delta
            while body[p] & 0x80:  # the offset delta: skipped
                p += 1
            p += 1
            b = body[p]
            if b < 0x80:
                n, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                n, p = read_varint(body, p)
            if n < 0:
                keys.append(None)
            else:
                keys.append(body[p : p + n])
                p += n
            b = body[p]
            if b < 0x80:
                n, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                n, p = read_varint(body, p)
            if n < 0:
                values.append(None)
            else:
                values.append(body[p : p + n])
                p += n
            if p + 1 == end and body[p] == 0:
                extras.append(_NO_HEADERS.pack(1, ts, 0) if ts >= 0 else None)
            elif p >= end:
                raise KafkaDecodeError("record fields run past its length")
            else:
                rec, _ = _record(body, pos, first_ts)
                extras.append(pack_extra(ts if ts >= 0 else None, rec.headers))
            pos = end
    except IndexError as exc:
        raise KafkaDecodeError("truncated record") from exc
    if pos != len(body):
        raise KafkaDecodeError("record batch has bytes after its records")
    return keys, values, extras


#: The extras of a record with a create time and no headers (``batch.pack_extra``).
_NO_HEADERS = struct.Struct("<BQH")


def decode_batches(data: bytes, room: int = RECORDS_ROOM_MAX) -> list[KafkaBatch]:
    """Every batch of a Produce request's records, checked: RecordBatch v2,
    or a message set of magic 0 or 1 (what Produce v0-v2 carries); together
    they may take ``room`` bytes (``cost``).

    Raises KafkaDecodeError (UnsupportedCodec for a codec it cannot read,
    TooLarge past ``room``)."""
    if len(data) > 16 and data[16] in (0, 1):
        return [decode_message_set(data, room)]
    out = []
    pos = 0
    left = _Room(room)
    while pos < len(data):
        if pos + HEADER_BYTES > len(data):
            raise KafkaDecodeError("truncated record batch header")
        (base, length, _leader_epoch, magic, crc, attributes, last_delta, first_ts, max_ts, pid,
         pepoch, base_seq, count) = _HEADER.unpack_from(data, pos)  # fmt: skip
        end = pos + _LENGTH_FROM + length
        if magic != 2:
            raise KafkaDecodeError(f"record batch magic {magic}: only v2 batches are taken")
        if length < HEADER_BYTES - _LENGTH_FROM or end > len(data):
            raise KafkaDecodeError("record batch length runs past the request")
        if google_crc32c.value(data[pos + _CRC_FROM : end]) != crc:
            raise KafkaDecodeError("record batch CRC does not match")
        if count < 0 or count * RECORD_BYTES > left.left:
            raise TooLarge(f"a record batch of {count} records: more than its room")
        body = decompress(
            attributes & COMPRESSION_MASK,
            data[pos + HEADER_BYTES : end],
            left.left - count * RECORD_BYTES,
        )
        if count > len(body):
            raise KafkaDecodeError(f"record batch of {count} records in {len(body)} bytes")
        taken = len(body) + count * RECORD_BYTES
        left.take(taken, "a record batch")
        keys, values, extras = _columns(body, count, first_ts)
        fields = (base, attributes, last_delta, first_ts, max_ts, pid, pepoch, base_seq)
        out.append(KafkaBatch(*fields, keys, values, extras, body, cost=taken))
        pos = end
    return out

"""Kafka's RecordBatch v2 encoded: what consumers fetch, from a log's
records given as columns (``_records`` has the format and the decoding).
Pure.

Records are written a column at a time where they can be; the varints of
small numbers (a record's deltas and lengths) come from a table built once.
"""

from __future__ import annotations

import struct

import google_crc32c

from ..batch import unpack_extra
from ..errors import ProtocolError
from ._codec import write_varint
from ._inflate import compress
from ._records import (
    _CRC_FROM,
    _HEADER,
    _LENGTH_FROM,
    _NO_HEADERS,
    CONTROL,
    HEADER_BYTES,
    TRANSACTIONAL,
)


def _zigzag(n: int) -> bytes:
    out = bytearray()
    write_varint(n, out)
    return bytes(out)


#: Zigzag varints of -1 .. VARINTS_TOP - 2, encoded once: a record's deltas
#: and lengths are small, and a table look-up is a tenth of encoding one.
VARINTS_TOP = 1 << 16
_VARINTS = [_zigzag(n) for n in range(-1, VARINTS_TOP - 1)]


def _varint(n: int) -> bytes:
    return _VARINTS[n + 1] if -1 <= n < VARINTS_TOP - 1 else _zigzag(n)


def encode_columns(
    offsets: list[int],
    timestamps: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    extras: list[bytes | None] | None = None,
    leader_epoch: int = -1,
    codec: int = 0,
    producer_id: int = -1,
    control: bool | None = None,
) -> bytes:
    """One uncompressed batch (CreateTime) of records given as columns,
    offsets ascending: what a fetch answers with.  ``leader_epoch``: the
    partition leader epoch the batch carries (the records' logstrand epoch);
    ``codec``: the Kafka codec its records are compressed with (0: none).  A record's ``extras``
    (``batch.pack_extra``) give its headers and the create time its producer
    sent, which is the time a consumer sees (else the log's timestamp).
    ``producer_id`` >= 0: the records are that producer's transaction's
    (the TRANSACTIONAL attribute), and with ``control`` its marker (the
    CONTROL attribute; the records are ``control_record``'s).
    Works a column at a time where it can."""
    headers: list[tuple[tuple[str, bytes | None], ...]] | None = None
    if extras is not None:
        timestamps, headers = _times_headers(timestamps, extras)
    base = offsets[0]
    first_ts = min(timestamps)
    parts: list[bytes] = []
    put = parts.append
    none = _VARINTS[0]
    no_headers = b"\x00"
    for i, (offset, ts, key, value) in enumerate(
        zip(offsets, timestamps, keys, values, strict=True)
    ):
        ts_d = _varint(ts - first_ts)
        off_d = _varint(offset - base)
        k_len = none if key is None else _varint(len(key))
        v_len = none if value is None else _varint(len(value))
        hs = no_headers if headers is None or not headers[i] else _headers_bytes(headers[i])
        size = (
            1 + len(ts_d) + len(off_d) + len(k_len) + len(v_len) + len(hs)
            + (0 if key is None else len(key)) + (0 if value is None else len(value))
        )  # fmt: skip
        put(_varint(size))
        put(b"\x00")
        put(ts_d)
        put(off_d)
        put(k_len)
        if key is not None:
            put(key)
        put(v_len)
        if value is not None:
            put(value)
        put(hs)
    span = (base, offsets[-1], first_ts, max(timestamps), len(offsets))
    return seal_records(b"".join(parts), span, leader_epoch, codec, producer_id, control)


def seal_records(
    records: bytes,
    span: tuple[int, int, int, int, int],
    leader_epoch: int,
    codec: int,
    producer_id: int = -1,
    control: bool | None = None,
) -> bytes:
    """A batch of ``records`` (encoded, uncompressed): compressed with
    ``codec`` and given its header.  ``span``: the base and last offsets,
    the first and max timestamps, and the record count (``encode_columns``
    says what the other arguments mean)."""
    base, last, first_ts, max_ts, count = span
    body = compress(codec, records)
    attributes = codec
    if producer_id >= 0:
        attributes |= TRANSACTIONAL | (CONTROL if control else 0)
    head = _HEADER.pack(
        base, HEADER_BYTES - _LENGTH_FROM + len(body), leader_epoch, 2, 0, attributes,
        last - base, first_ts, max_ts, producer_id, -1, -1, count,
    )  # fmt: skip
    crc = google_crc32c.extend(google_crc32c.value(head[_CRC_FROM:]), body)
    return head[:17] + struct.pack(">I", crc) + head[_CRC_FROM:] + body


def control_record(commit: bool) -> tuple[bytes, bytes]:
    """The key and value of a control batch's one record: version 0 and
    type (0 ABORT, 1 COMMIT); version 0 and the coordinator epoch (none
    here: 0), as Kafka's consumers read them."""
    return struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0)


def _times_headers(
    timestamps: list[int], extras: list[bytes | None]
) -> tuple[list[int], list[tuple[tuple[str, bytes | None], ...]] | None]:
    """The time each record shows a consumer (its create time, else the
    log's) and its headers (None: no record has any).  Extras that do not
    decode (a native writer's own bytes) count as none."""
    n = len(extras)
    if None not in extras and sum(map(len, extras)) == n * _NO_HEADERS.size:  # type: ignore[arg-type]
        # The usual run (a Kafka producer's records, no headers): every
        # create time read at once, when every record has exactly that shape.
        fields = struct.unpack("<" + "BQH" * n, b"".join(extras))  # type: ignore[arg-type]
        if fields[0::3].count(1) == n and fields[2::3].count(0) == n:
            return list(fields[1::3]), None
    out = list(timestamps)
    headers: list[tuple[tuple[str, bytes | None], ...]] = [()] * len(out)
    seen = False
    for i, x in enumerate(extras):
        if x is None:
            continue
        if len(x) == _NO_HEADERS.size and x[0] == 1:  # a create time, no headers
            out[i] = int.from_bytes(x[1:9], "little")
            continue
        try:
            created, hs = unpack_extra(x)
        except ProtocolError:
            continue
        if created is not None:
            out[i] = created
        headers[i] = hs
        seen = seen or bool(hs)
    return out, headers if seen else None


def _headers_bytes(headers: tuple[tuple[str, bytes | None], ...]) -> bytes:
    out = bytearray()
    write_varint(len(headers), out)
    for name, value in headers:
        raw = name.encode()
        write_varint(len(raw), out)
        out += raw
        if value is None:
            write_varint(-1, out)
        else:
            write_varint(len(value), out)
            out += value
    return bytes(out)

"""The fixed part of a packed batch's layout (``_packed`` describes it): the
header's fields and layout bits, and how a header is built."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final, Required, TypedDict, Unpack

import google_crc32c

from ..errors import InvalidArgumentError, ProtocolError
from ..records import COPYSET_SIZE_MAX

if TYPE_CHECKING:
    from collections.abc import Sequence

FORMAT: Final = 2
LSNS: Final = 0x01
TIMESTAMPS: Final = 0x02
FLAGS: Final = 0x04
PRODUCER: Final = 0x08
#: The body has a third length per record, and the records' extras
#: (``_extras``) after the payloads in the blob.
EXTRAS: Final = 0x10
LAYOUT_ALL: Final = LSNS | TIMESTAMPS | FLAGS | PRODUCER | EXTRAS
PRODUCER_FIELDS = struct.Struct("<QQ")

COUNT_MAX: Final = 1 << 24
#: A body decompresses to at most this many bytes (a bigger claim is refused
#: before anything is decompressed).
RAW_BYTES_MAX: Final = 256 * 1024 * 1024


def check_size(count: int, raw_len: int) -> None:
    """A batch's record count and raw body size, within the limits (what
    ``PackedBatch.parse`` checks of a header, and a client's batch of itself)."""
    if count == 0 or count > COUNT_MAX:
        raise ProtocolError(f"packed batch of {count} records")
    if raw_len > RAW_BYTES_MAX:
        raise ProtocolError(f"packed batch body claims {raw_len} bytes")


def payload_bytes_of(lens: list[int], count: int) -> int:
    """The bytes of the payloads alone, from a body's lengths (keys and extras left out)."""
    pays = lens[count : 2 * count]
    return sum(pays) + pays.count(-1)


HEAD = struct.Struct("<HBBIQQIHBxIIII")
HEAD_BYTES: Final = HEAD.size  # 48
CRC_AT: Final = 44
crc32c = google_crc32c.value
crc_extend = google_crc32c.extend


def pad8(n: int) -> int:
    return (n + 7) & ~7


class Head(TypedDict, total=False):
    """A header's fields beyond the body's (``header``, ``PackedBatch.assemble``)."""

    first_lsn: Required[int]
    timestamps_ms: Required[Sequence[int] | int]
    flags: Sequence[int] | int
    lsns: Sequence[int] | None
    wave: int
    copyset: tuple[int, ...]
    producer: tuple[int, int] | None
    #: The body has the records' extras (layout bit ``EXTRAS``).
    extras: bool


def header(
    body_len: int, raw_len: int, body_crc: int, codec: int, count: int, **head: Unpack[Head]
) -> bytes:
    """Everything before the body: the fixed header with its checksum, the
    copyset, and the columns that are not constant."""
    first_lsn, timestamps_ms = head["first_lsn"], head["timestamps_ms"]
    flags, lsns = head.get("flags", 0), head.get("lsns")
    copyset, producer = head.get("copyset", ()), head.get("producer")
    if len(copyset) > COPYSET_SIZE_MAX:
        raise InvalidArgumentError(f"copyset of {len(copyset)} nodes is too large")
    layout = EXTRAS if head.get("extras") else 0
    cols: list[bytes] = [struct.pack(f"<{len(copyset)}I", *copyset)]
    if len(copyset) % 2:
        cols.append(b"\0" * 4)
    if producer is not None:
        layout |= PRODUCER
        cols.append(PRODUCER_FIELDS.pack(*producer))
    if lsns is not None and (lsns[0] != first_lsn or lsns[-1] - lsns[0] != count - 1):
        layout |= LSNS
        cols.append(struct.pack(f"<{count}Q", *lsns))
    ts0 = timestamps_ms if isinstance(timestamps_ms, int) else timestamps_ms[0]
    if not isinstance(timestamps_ms, int) and timestamps_ms.count(ts0) != count:
        layout |= TIMESTAMPS
        cols.append(struct.pack(f"<{count}Q", *timestamps_ms))
    fl0 = flags if isinstance(flags, int) else flags[0]
    if not isinstance(flags, int) and flags.count(fl0) != count:
        layout |= FLAGS
        col = struct.pack(f"<{count}H", *flags)
        cols.append(col + b"\0" * (pad8(len(col)) - len(col)))
    tail = b"".join(cols)
    fixed = HEAD.pack(
        FORMAT,
        codec,
        layout,
        count,
        first_lsn,
        ts0,
        head.get("wave", 0),
        fl0,
        len(copyset),
        body_len,
        raw_len,
        body_crc,
        0,
    )[:CRC_AT]
    hcrc = crc_extend(crc32c(fixed), tail)
    return b"".join((fixed, hcrc.to_bytes(4, "little"), tail))


_HIGH = bytes(range(0x80, 0x100))


def check_lengths(data: bytes, body_start: int, n: int, raw_len: int) -> list[int]:
    """The body's ``n`` key, payload (and extras) lengths (-1: none), checked
    against its size.  (Read on every batch a node serves and a reader
    decodes: each check is one pass in C, and none compares ints one by one.)"""
    end = body_start + 4 * n
    view = memoryview(data)
    lens: list[int] = view[body_start:end].cast("i").tolist()
    nones = lens.count(-1)
    # A length is -1 or at least 0: as many have their top bit set (the last
    # byte of each little-endian word) as are -1.
    tops = (data if isinstance(data, bytes) else bytes(view))[body_start + 3 : end : 4]
    if len(tops) - len(tops.translate(None, _HIGH)) != nones:
        raise ProtocolError("packed batch has a bad key or payload length")
    if sum(lens) + nones != raw_len:
        raise ProtocolError("packed batch lengths disagree with its body")
    return lens

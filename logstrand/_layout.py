"""The fixed part of a packed batch's layout (``logstrand.packed`` describes
it): the header's fields and layout bits, and how a header is built."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

import google_crc32c

from .errors import InvalidArgumentError
from .records import COPYSET_SIZE_MAX

if TYPE_CHECKING:
    from collections.abc import Sequence

FORMAT: Final = 2
LSNS: Final = 0x01
TIMESTAMPS: Final = 0x02
FLAGS: Final = 0x04
PRODUCER: Final = 0x08
_LAYOUT_ALL: Final = LSNS | TIMESTAMPS | FLAGS | PRODUCER
_PRODUCER = struct.Struct("<QQ")

_HEAD = struct.Struct("<HBBIQQIHBxIIII")
HEAD_BYTES: Final = _HEAD.size  # 48
_CRC_AT: Final = 44
crc32c = google_crc32c.value
_crc_extend = google_crc32c.extend


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def _header(
    body_len: int,
    raw_len: int,
    body_crc: int,
    codec: int,
    count: int,
    first_lsn: int,
    timestamps_ms: Sequence[int] | int,
    flags: Sequence[int] | int,
    lsns: Sequence[int] | None,
    wave: int,
    copyset: tuple[int, ...],
    producer: tuple[int, int] | None = None,
) -> bytes:
    """Everything before the body: the fixed header with its checksum, the
    copyset, and the columns that are not constant."""
    if len(copyset) > COPYSET_SIZE_MAX:
        raise InvalidArgumentError(f"copyset of {len(copyset)} nodes is too large")
    layout = 0
    cols: list[bytes] = [struct.pack(f"<{len(copyset)}I", *copyset)]
    if len(copyset) % 2:
        cols.append(b"\0" * 4)
    if producer is not None:
        layout |= PRODUCER
        cols.append(_PRODUCER.pack(*producer))
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
        cols.append(col + b"\0" * (_pad8(len(col)) - len(col)))
    tail = b"".join(cols)
    head = _HEAD.pack(
        FORMAT,
        codec,
        layout,
        count,
        first_lsn,
        ts0,
        wave,
        fl0,
        len(copyset),
        body_len,
        raw_len,
        body_crc,
        0,
    )[:_CRC_AT]
    hcrc = _crc_extend(crc32c(head), tail)
    return b"".join((head, hcrc.to_bytes(4, "little"), tail))

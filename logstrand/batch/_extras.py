"""A record's extras: what a record may carry beside its key and payload,
the headers (name → value pairs, as Kafka records have them) and the time
its producer says it made the record (Kafka's CreateTime; the log's own
timestamp stays the sequencer's).  Pure.

A batch whose records have extras sets the layout bit ``EXTRAS`` and keeps
one more length per record in its body, the extras after the payloads in
the blob (``_packed``).  One record's extras, little-endian::

    u8  bits                 (0x01: a create time follows)
    u64 create_time_ms       (when bit 0x01)
    u16 header_count
    header_count times:
        u16 name_len, name (UTF-8)
        i32 value_len (-1: a null value), value

A record with neither headers nor a create time has no extras (length -1).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from ..errors import InvalidArgumentError, ProtocolError

if TYPE_CHECKING:
    from collections.abc import Sequence

#: One header: a name and a value (None: a null value, which Kafka allows).
Header = tuple[str, bytes | None]

HEADERS_MAX: Final = 0xFFFF
HEADER_NAME_BYTES_MAX: Final = 0xFFFF
_CREATE_TIME: Final = 0x01
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_NO_EXTRAS: Final[tuple[int | None, tuple[Header, ...]]] = (None, ())


def pack_extra(create_time_ms: int | None = None, headers: Sequence[Header] = ()) -> bytes | None:
    """One record's extras (None when it has none).

    Raises:
        InvalidArgumentError: a header that is not (str, bytes or None), too
            many headers, a name too long, a create time out of range.
    """
    if create_time_ms is None and not headers:
        return None
    if len(headers) > HEADERS_MAX:
        raise InvalidArgumentError(f"{len(headers)} headers, more than {HEADERS_MAX}")
    parts = [b"\x01" if create_time_ms is not None else b"\x00"]
    if create_time_ms is not None:
        if not 0 <= create_time_ms < 1 << 64:
            raise InvalidArgumentError(f"create time {create_time_ms} is out of range")
        parts.append(_U64.pack(create_time_ms))
    parts.append(_U16.pack(len(headers)))
    for header in headers:
        parts += _pack_header(header)
    return b"".join(parts)


def _pack_header(header: Header) -> list[bytes]:
    try:
        name, value = header
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"a header is a (name, value) pair, not {header!r}") from None
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a header's name is a str, not {type(name).__name__}")
    raw = name.encode()
    if len(raw) > HEADER_NAME_BYTES_MAX:
        raise InvalidArgumentError(f"header name of {len(raw)} bytes is too long")
    if value is None:
        return [_U16.pack(len(raw)), raw, _I32.pack(-1)]
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(f"header {name!r}: a value is bytes or None")
    return [_U16.pack(len(raw)), raw, _I32.pack(len(value)), bytes(value)]


def unpack_extra(extra: bytes | None) -> tuple[int | None, tuple[Header, ...]]:
    """(create time or None, headers) of one record's extras.

    Raises:
        ProtocolError: the bytes are not extras (a writer that did not use
            ``pack_extra``).
    """
    if extra is None:
        return _NO_EXTRAS
    try:
        return _unpack(extra)
    except (struct.error, UnicodeDecodeError, IndexError):
        raise ProtocolError("a record's extras are malformed") from None


def _unpack(extra: bytes) -> tuple[int | None, tuple[Header, ...]]:
    bits = extra[0]
    if bits & ~_CREATE_TIME:
        raise ProtocolError(f"a record's extras have unknown bits {bits:#x}")
    at = 1
    created = None
    if bits & _CREATE_TIME:
        created = _U64.unpack_from(extra, at)[0]
        at += 8
    (n,) = _U16.unpack_from(extra, at)
    at += 2
    headers: list[Header] = []
    for _ in range(n):
        (nlen,) = _U16.unpack_from(extra, at)
        at += 2
        name = _take(extra, at, nlen).decode()
        at += nlen
        (vlen,) = _I32.unpack_from(extra, at)
        at += 4
        if vlen < -1:
            raise ProtocolError("a record's extras are malformed")
        value = None if vlen < 0 else _take(extra, at, vlen)
        at += max(vlen, 0)
        headers.append((name, value))
    if at != len(extra):
        raise ProtocolError("a record's extras are malformed")
    return created, tuple(headers)


def _take(extra: bytes, at: int, n: int) -> bytes:
    if at + n > len(extra):
        raise ProtocolError("a record's extras are malformed")
    return extra[at : at + n]


def extras_of(
    n: int,
    headers: Sequence[Sequence[Header] | None] | None = None,
    create_times: Sequence[int | None] | None = None,
) -> list[bytes | None] | None:
    """The extras of ``n`` records from their headers and create times
    (either may be None); None when no record has any.

    Raises:
        InvalidArgumentError: a column of another length, or a bad header.
    """
    if headers is None and create_times is None:
        return None
    if (headers is not None and len(headers) != n) or (
        create_times is not None and len(create_times) != n
    ):
        raise InvalidArgumentError("headers, create times and payloads differ in length")
    hs = headers if headers is not None else [()] * n
    cs = create_times if create_times is not None else [None] * n
    return none_if_empty([pack_extra(c, h or ()) for h, c in zip(hs, cs, strict=True)])


def none_if_empty(extras: Sequence[bytes | None] | None) -> list[bytes | None] | None:
    """``extras`` as a batch keeps them: None when no record has any."""
    if extras is None or extras.count(None) == len(extras):
        return None
    return list(extras)

"""Framing and the CBOR codec.

A frame is a 4-byte big-endian body length followed by the body, a CBOR array
``[type_id, *fields]``.  Frames are bounded (``FRAME_BYTES_MAX_DEFAULT``,
32 MiB, configurable per decoder): a length prefix over the bound is rejected
before any of the body is buffered.

Rule: every failure to decode bytes from a peer raises ``ProtocolError`` and
nothing else.  Callers may therefore catch exactly one exception to drop a
misbehaving connection without crashing the node.
"""

from __future__ import annotations

import struct
from typing import Any

import attrs
import cbor2

from ..errors import InvalidArgumentError, ProtocolError
from ..records import RecordBatch
from ._registry import MESSAGE_TYPES

FRAME_BYTES_MAX_DEFAULT = 32 * 1024 * 1024
_LEN = struct.Struct(">I")
HEADER_BYTES = _LEN.size


def _field_to_wire(value: Any) -> Any:
    if isinstance(value, RecordBatch):
        return value.pack()
    return value


def encode_body(msg: Any) -> bytes:
    """CBOR body of a message (no length prefix)."""
    cls = type(msg)
    type_id = getattr(cls, "TYPE_ID", None)
    if type_id is None or MESSAGE_TYPES.get(type_id) is not cls:
        raise TypeError(f"{cls.__name__} is not a registered wire message")
    values = [_field_to_wire(getattr(msg, a.name)) for a in attrs.fields(cls)]
    return cbor2.dumps([type_id, *values])


def encode_frame(msg: Any, *, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> bytes:
    """Length-prefixed frame of a message.

    Raises:
        InvalidArgumentError: (status TOOBIG) the frame would exceed ``frame_bytes_max``.
    """
    from ..errors import Status

    body = encode_body(msg)
    if len(body) > frame_bytes_max:
        raise InvalidArgumentError(
            f"{type(msg).__name__} frame of {len(body)} bytes exceeds {frame_bytes_max}",
            Status.TOOBIG,
        )
    return _LEN.pack(len(body)) + body


def _reject_tag(_decoder: Any, tag: Any) -> Any:
    raise ValueError(f"unexpected CBOR tag {tag.tag}")


def decode_body(body: bytes) -> Any:
    """Decode one message body.

    Raises:
        ProtocolError: anything that is not a valid message.
    """
    try:
        raw = cbor2.loads(body, tag_hook=_reject_tag)
    except Exception as exc:  # cbor2 raises several types on garbage
        raise ProtocolError(f"undecodable CBOR: {exc}") from None
    if type(raw) is not list or not raw or type(raw[0]) is not int:
        raise ProtocolError("message is not an array starting with a type id")
    cls = MESSAGE_TYPES.get(raw[0])
    if cls is None:
        raise ProtocolError(f"unknown message type {raw[0]}")
    fields = attrs.fields(cls)
    values = raw[1:]
    required = sum(1 for a in fields if a.default is attrs.NOTHING)
    if not required <= len(values) <= len(fields):
        raise ProtocolError(f"{cls.__name__}: {len(values)} fields, expected {len(fields)}")
    try:
        return cls(*values)
    except ProtocolError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"invalid {cls.__name__}: {exc}") from None


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes, then take messages with ``next_message``.

    Memory is bounded: at most one frame (``frame_bytes_max``) plus the bytes of
    one ``feed`` call are buffered.
    """

    def __init__(self, *, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        if frame_bytes_max <= 0:
            raise ValueError("frame_bytes_max must be positive")
        self.frame_bytes_max = frame_bytes_max
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos * 2 > len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_message(self) -> Any | None:
        """The next complete message, or None when more bytes are needed.

        Raises:
            ProtocolError: the next frame is oversized or malformed.  The decoder
            is then unusable: the connection should be closed.
        """
        avail = len(self._buf) - self._pos
        if avail < HEADER_BYTES:
            return None
        (size,) = _LEN.unpack_from(self._buf, self._pos)
        if size > self.frame_bytes_max:
            raise ProtocolError(f"frame of {size} bytes exceeds limit {self.frame_bytes_max}")
        if avail < HEADER_BYTES + size:
            return None
        start = self._pos + HEADER_BYTES
        body = bytes(self._buf[start : start + size])
        self._pos = start + size
        return decode_body(body)

    def messages(self) -> list[Any]:
        """All complete messages buffered now."""
        out = []
        while (msg := self.next_message()) is not None:
            out.append(msg)
        return out

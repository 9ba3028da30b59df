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

from ..batch import PackedBatch
from ..errors import InvalidArgumentError, ProtocolError
from ._registry import MESSAGE_TYPES

FRAME_BYTES_MAX_DEFAULT = 32 * 1024 * 1024
_LEN = struct.Struct(">I")
HEADER_BYTES = _LEN.size


def _field_to_wire(value: Any) -> Any:
    if isinstance(value, PackedBatch):
        return value.data
    if type(value) is tuple and value and isinstance(value[0], PackedBatch):
        return [v.data for v in value]
    return value


#: A message whose byte strings hold at least this much is written piece by
#: piece (``_body_parts``), its byte strings joined once, not copied through
#: cbor2's encoder: framing a node's reply of four 1 MiB batches takes
#: 0.46 ms so, 5.4 ms through cbor2 (``bench/micro.py --wire``).  Such
#: messages are what a reader of big records gets, and STOREs of them.
BIG_BYTES = 64 * 1024


def _values(msg: Any) -> list[Any]:
    cls = type(msg)
    type_id = getattr(cls, "TYPE_ID", None)
    if type_id is None or MESSAGE_TYPES.get(type_id) is not cls:
        raise TypeError(f"{cls.__name__} is not a registered wire message")
    fields = attrs.fields(cls)
    n = len(fields)
    # Trailing fields at their default are left out (the decoder fills them
    # in): a field added at a message's end reaches a peer of an older
    # protocol, which would refuse the message, only when it says something.
    for name, default in _trailing(cls):
        if getattr(msg, name) != default:
            break
        n -= 1
    return [type_id, *(_field_to_wire(getattr(msg, a.name)) for a in fields[:n])]


_TRAILING: dict[type, tuple[tuple[str, Any], ...]] = {}


def _trailing(cls: type) -> tuple[tuple[str, Any], ...]:
    """A message's trailing fields with a plain default, last first."""
    out = _TRAILING.get(cls)
    if out is None:
        found = []
        for a in reversed(attrs.fields(cls)):
            if a.default is attrs.NOTHING or isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
                break
            found.append((a.name, a.default))
        out = _TRAILING[cls] = tuple(found)
    return out


def _big(value: Any) -> int:
    """Bytes in the byte strings of a field (a batch, or a list of them)."""
    if type(value) is bytes:
        return len(value)
    if type(value) is list and value and type(value[0]) is bytes:
        return sum(len(v) for v in value if type(v) is bytes)
    return 0


def _head(major: int, n: int) -> bytes:
    """A CBOR item's head: its major type and length, as cbor2 writes it."""
    if n < 24:
        return bytes((major << 5 | n,))
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes((major << 5 | info,)) + n.to_bytes(size, "big")
    raise ValueError("a CBOR length past 2^64")


def _body_parts(values: list[Any]) -> list[bytes]:
    """The body of ``[type_id, *fields]`` as pieces whose concatenation is
    what ``cbor2.dumps`` writes: byte strings (and lists of them) by
    reference, everything else through cbor2."""
    out = [_head(4, len(values))]
    for v in values:
        if type(v) is bytes:
            out += (_head(2, len(v)), v)
        elif type(v) is list and v and all(type(x) is bytes for x in v):
            out.append(_head(4, len(v)))
            for x in v:
                out += (_head(2, len(x)), x)
        else:
            out.append(cbor2.dumps(v))
    return out


def _body(values: list[Any]) -> list[bytes]:
    """The CBOR body of ``values``, in pieces (one when it is small)."""
    if sum(map(_big, values)) < BIG_BYTES:
        return [cbor2.dumps(values)]
    return _body_parts(values)


def encode_body(msg: Any) -> bytes:
    """CBOR body of a message (no length prefix)."""
    return b"".join(_body(_values(msg)))


def encode_frame(msg: Any, *, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> bytes:
    """Length-prefixed frame of a message (its bytes copied once).

    Raises:
        InvalidArgumentError: (status TOOBIG) the frame would exceed ``frame_bytes_max``.
    """
    from ..errors import Status

    parts = _body(_values(msg))
    size = sum(map(len, parts))
    if size > frame_bytes_max:
        raise InvalidArgumentError(
            f"{type(msg).__name__} frame of {size} bytes exceeds {frame_bytes_max}",
            Status.TOOBIG,
        )
    return b"".join((_LEN.pack(size), *parts))


def _reject_tag(_decoder: Any, tag: Any) -> Any:
    raise ValueError(f"unexpected CBOR tag {tag.tag}")


#: Items (array elements, numbers, strings) one body may hold by default.  A
#: message is a short array of fields whose bulk travels as byte strings, so a
#: request has a few dozen items; replies with many numbers (a directory, a
#: digest's waves) stay far below this.  It bounds what decoding a frame costs:
#: a frame of millions of one-byte items would otherwise cost seconds of CPU
#: and hundreds of MB before any check could run.
ITEMS_MAX_DEFAULT = 1 << 20
_DEPTH_MAX = 3


def count_items(body: bytes | memoryview, items_max: int) -> int:
    """Walk the CBOR item headers of ``body`` without building anything.

    Byte and text strings are skipped by their length, so the cost is one
    step per item, never per byte.  Returns the number of items.

    Raises:
        ProtocolError: more than ``items_max`` items, nesting deeper than a
        message has, a map, a tag, an indefinite length, or a truncated body.
    """
    pos, end, count = 0, len(body), 0
    # Stack of items still expected at each open array level.
    pending = [1]
    while pending:
        if pending[-1] == 0:
            pending.pop()
            continue
        pending[-1] -= 1
        if pos >= end:
            raise ProtocolError("truncated CBOR body")
        count += 1
        if count > items_max:
            raise ProtocolError(f"message has more than {items_max} items")
        head = body[pos]
        major, info = head >> 5, head & 0x1F
        pos += 1
        if info < 24:
            arg = info
        elif info <= 27:
            n = 1 << (info - 24)
            if pos + n > end:
                raise ProtocolError("truncated CBOR body")
            arg = int.from_bytes(body[pos : pos + n], "big")
            pos += n
        else:
            raise ProtocolError("indefinite or reserved CBOR length")
        if major in (2, 3):
            pos += arg
            if pos > end:
                raise ProtocolError("truncated CBOR body")
        elif major == 4:
            if len(pending) >= _DEPTH_MAX:
                raise ProtocolError("CBOR nested too deep for a message")
            pending.append(arg)
        elif major in (5, 6):
            raise ProtocolError("CBOR maps and tags are not part of any message")
    if pos != end:
        raise ProtocolError("bytes after the message")
    return count


def decode_body(body: bytes | memoryview, *, items_max: int = ITEMS_MAX_DEFAULT) -> Any:
    """Decode one message body (first checking its shape with ``count_items``).

    Raises:
        ProtocolError: anything that is not a valid message.
    """
    count_items(body, items_max)
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

    def __init__(
        self,
        *,
        frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
        items_max: int = ITEMS_MAX_DEFAULT,
    ) -> None:
        if frame_bytes_max <= 0:
            raise ValueError("frame_bytes_max must be positive")
        self.frame_bytes_max = frame_bytes_max
        #: Both limits may be changed between frames (a server reads a small
        #: first frame before the handshake, then the full size).
        self.items_max = items_max
        self._buf = bytearray()
        self._pos = 0
        #: Bytes (with the length prefix) of the frame ``next_message`` returned last.
        self.last_frame_bytes = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def claimed_bytes(self) -> int:
        """Bytes (with the prefix) the frame begun in the buffer says it has
        (its prefix when not all of that is in yet; 0 when nothing is)."""
        avail = len(self._buf) - self._pos
        if avail < HEADER_BYTES:
            return HEADER_BYTES if avail else 0
        return HEADER_BYTES + int(_LEN.unpack_from(self._buf, self._pos)[0])

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
        self._pos = start + size
        self.last_frame_bytes = HEADER_BYTES + size
        # Decoded in place: cbor2 copies each byte string out of the buffer
        # (the batches' bytes), so the body itself is not copied first, and
        # the view is let go before the buffer changes again.
        with memoryview(self._buf) as view, view[start : start + size] as body:
            return decode_body(body, items_max=self.items_max)

    def messages(self) -> list[Any]:
        """All complete messages buffered now."""
        out = []
        while (msg := self.next_message()) is not None:
            out.append(msg)
        return out

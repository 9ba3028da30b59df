"""Kafka's message encoding, compiled from the schemas in ``specs.json``.

Theory of operation
-------------------
Each Kafka request and response is a struct of typed fields; which fields
exist, and how strings, arrays and bytes are framed, depends on the version.
``specs.json`` (made by ``tools/kafka_specs.py`` from Kafka's own JSON
schemas) holds the layouts.  ``compile_struct`` turns one layout at one
version into a decoder and an encoder: plain closures over ``struct``
formats, built once per (message, version) and cached, so a request costs
one function call per field and no look-up of the schema.

Messages are dicts keyed by the fields' snake-case names.  A decoder fills
in every field of the layout, with its default for fields the version does
not carry, so handlers read any version the same way; an encoder takes
missing fields as their defaults and leaves out what the version has not.

Flexible versions (KIP-482) frame strings, bytes and arrays with an unsigned
varint of length + 1 (0: null) and end every struct with tagged fields;
tagged fields this code does not know are skipped on decode.

What decoding may cost
----------------------
A request comes from a peer that may be hostile, so its decoding is bounded
by the frame, not by what the frame claims:

- time is linear in the frame: every byte is looked at a bounded number of
  times.  A tagged field is decoded in place, bounded by a memoryview of
  the frame cut at the field's end (an O(1) slice; a copy per field made
  a frame of repeated tags quadratic), and tags must come in increasing
  order, each at most once (Kafka's rule), so no field is decoded twice;
- memory is bounded by ``Items``: every array item decoded takes one from
  the decoder's allowance.  Items are what decoding multiplies: two bytes
  on the wire (an empty topic name and its tagged section) become a dict of
  ~200 bytes, so counting wire bytes alone lets 8 MiB become 1.8 GB.  The
  server reserves ``ITEM_BYTES`` of its receive budget for each item it
  allows (``_server``); an array longer than the allowance raises
  ``TooManyItems`` before its items are made.

Errors: every malformed input raises ``KafkaDecodeError`` (never IndexError
or struct.error), which the server answers by closing the connection.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

Buffer = bytes | memoryview
Decoder = Callable[[Buffer, int, "Items"], tuple[Any, int]]
Encoder = Callable[[Any, bytearray], None]

OPEN = 32767
#: What an array item decoded is taken to cost in memory, in bytes: a dict
#: of a few fields and its small strings (``tests/unit/test_kafka_decode_cost``
#: holds every request of every version served to it).
ITEM_BYTES = 512


class KafkaDecodeError(ValueError):
    """Bytes that are not the message they claim to be."""


class TooManyItems(KafkaDecodeError):
    """The request has more array items than its decoder was allowed."""


class Items:
    """How many more array items a decode may make (see the module docstring)."""

    __slots__ = ("allowed", "left")

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.left = allowed

    @property
    def used(self) -> int:
        return self.allowed - self.left

    def take(self, n: int) -> None:
        if n > self.left:
            raise TooManyItems(f"an array of {n} items, past the {self.allowed} allowed")
        self.left -= n


#: For decoding what this process made itself (responses, in tests and tools).
def unbounded() -> Items:
    return Items(1 << 62)


# -- varints ---------------------------------------------------------------------


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise KafkaDecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise KafkaDecodeError("varint too long")


def write_uvarint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zigzag varint (record fields)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def write_varint(value: int, out: bytearray) -> None:
    write_uvarint((value << 1) ^ (value >> 63), out)


# -- fixed-size fields -------------------------------------------------------------

_FIXED = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_I16 = _FIXED["int16"]
_I32 = _FIXED["int32"]
ZERO_UUID = bytes(16)


def _fixed(kind: str) -> tuple[Decoder, Encoder]:
    fmt = _FIXED[kind]
    size, unpack, pack = fmt.size, fmt.unpack_from, fmt.pack

    def dec(buf: Buffer, pos: int, _items: Items) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise KafkaDecodeError(f"truncated {kind}")
        return unpack(buf, pos)[0], pos + size

    def enc(value: Any, out: bytearray) -> None:
        try:
            out += pack(0 if value is None else value)
        except struct.error as exc:
            raise ValueError(f"{kind} out of range: {value!r}") from exc

    return dec, enc


def _uuid() -> tuple[Decoder, Encoder]:
    def dec(buf: Buffer, pos: int, _items: Items) -> tuple[Any, int]:
        if pos + 16 > len(buf):
            raise KafkaDecodeError("truncated uuid")
        return bytes(buf[pos : pos + 16]), pos + 16

    def enc(value: Any, out: bytearray) -> None:
        out += value.bytes if isinstance(value, uuid.UUID) else (value or ZERO_UUID)

    return dec, enc


# -- lengths: classic (int16/int32, -1 for null) or compact (uvarint n + 1) ----------


def _read_len(buf: Buffer, pos: int, compact: bool, wide: bool) -> tuple[int, int]:
    """A length; -1 means null."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    fmt = _I32 if wide else _I16
    if pos + fmt.size > len(buf):
        raise KafkaDecodeError("truncated length")
    return fmt.unpack_from(buf, pos)[0], pos + fmt.size


def _write_len(n: int, out: bytearray, compact: bool, wide: bool) -> None:
    if compact:
        write_uvarint(n + 1, out)
    else:
        out += (_I32 if wide else _I16).pack(n)


def _blob(kind: str, compact: bool, nullable: bool) -> tuple[Decoder, Encoder]:
    """string, bytes and records: a length, then the bytes."""
    text = kind == "string"
    wide = not text

    def dec(buf: Buffer, pos: int, _items: Items) -> tuple[Any, int]:
        n, pos = _read_len(buf, pos, compact, wide)
        if n < 0:
            # Kafka's rule: null only where the schema allows it (a handler
            # is never given None for a field it takes as a string).
            if not nullable:
                raise KafkaDecodeError(f"a null {kind} where the schema has none")
            return None, pos
        end = pos + n
        if end > len(buf):
            raise KafkaDecodeError(f"{kind} of {n} bytes runs past the message")
        raw = buf[pos:end]
        if text:
            try:
                return bytes(raw).decode(), end
            except UnicodeDecodeError as exc:
                raise KafkaDecodeError(f"string is not UTF-8: {exc}") from exc
        return bytes(raw), end

    def enc(value: Any, out: bytearray) -> None:
        if value is None:
            if not nullable:
                value = "" if text else b""
            else:
                _write_len(-1, out, compact, wide)
                return
        raw = value.encode() if text else value
        _write_len(len(raw), out, compact, wide)
        out += raw

    return dec, enc


def _array(item: tuple[Decoder, Encoder], compact: bool, nullable: bool) -> tuple[Decoder, Encoder]:
    item_dec, item_enc = item

    def dec(buf: Buffer, pos: int, items: Items) -> tuple[Any, int]:
        n, pos = _read_len(buf, pos, compact, True)
        if n < 0:
            return (None if nullable else []), pos
        if n > len(buf) - pos:  # every item takes at least a byte
            raise KafkaDecodeError(f"array of {n} items in {len(buf) - pos} bytes")
        items.take(n)  # before any is made: the allowance bounds memory
        out = []
        for _ in range(n):
            value, pos = item_dec(buf, pos, items)
            out.append(value)
        return out, pos

    def enc(value: Any, out: bytearray) -> None:
        if value is None:
            _write_len(-1 if nullable else 0, out, compact, True)
            return
        _write_len(len(value), out, compact, True)
        for v in value:
            item_enc(v, out)

    return dec, enc


# -- structs -------------------------------------------------------------------------


def _in(rng: list[int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


def default_of(field: list[Any], version: int) -> Any:
    """What a field holds when the message does not carry it."""
    name, kind, _v, nullable, _tag, default, children, _flex = field
    if default == "null":
        return None
    if name.endswith("error_message") and kind == "string" and _in(nullable, version):
        # "The error message, or null if there was no error": Kafka's
        # brokers set null for a success (ApiError.NONE's message) even where
        # the schema gives no default, and clients show it (kafka-python's
        # admin client returns the response as it came).
        return None
    if kind.startswith("[]"):
        return []
    if kind == "struct":
        return {f[0]: default_of(f, version) for f in children}
    if kind == "bool":
        return default == "true"
    if kind in ("string",):
        return default or ""
    if kind in ("bytes",):
        return b""
    if kind == "records":
        return None
    if kind == "uuid":
        return ZERO_UUID
    if kind == "float64":
        return float(default or 0)
    if default is None:
        return 0
    return int(default, 16) if default.lower().startswith("0x") else int(default)


def _field_codec(field: list[Any], version: int, flexible: bool) -> tuple[Decoder, Encoder]:
    _name, kind, _v, nullable_rng, _tag, _default, children, own_flex = field
    compact = flexible if own_flex is None else _in(own_flex or None, version)
    nullable = _in(nullable_rng, version)
    inner = kind[2:] if kind.startswith("[]") else kind
    if inner == "struct":
        item = compile_struct(children, version, flexible)
    elif inner in _FIXED:
        item = _fixed(inner)
    elif inner == "uuid":
        item = _uuid()
    else:
        item = _blob(inner, compact, nullable)
    if kind.startswith("[]"):
        return _array(item, compact, nullable)
    if inner == "struct" and nullable:
        return _nullable_struct(item)
    return item


def _nullable_struct(item: tuple[Decoder, Encoder]) -> tuple[Decoder, Encoder]:
    """A struct that may be null: a signed byte first (-1 null, 1 present)."""
    item_dec, item_enc = item

    def dec(buf: Buffer, pos: int, items: Items) -> tuple[Any, int]:
        if pos >= len(buf):
            raise KafkaDecodeError("truncated struct")
        if buf[pos] == 0xFF:
            return None, pos + 1
        return item_dec(buf, pos + 1, items)

    def enc(value: Any, out: bytearray) -> None:
        if value is None:
            out.append(0xFF)
        else:
            out.append(1)
            item_enc(value, out)

    return dec, enc


_CACHE: dict[tuple[int, int, bool], tuple[Decoder, Encoder]] = {}


def compile_struct(fields: list[Any], version: int, flexible: bool) -> tuple[Decoder, Encoder]:
    """The decoder and encoder of a struct with ``fields`` at ``version``."""
    key = (id(fields), version, flexible)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    plain: list[tuple[str, Decoder, Encoder, Any]] = []
    tagged: dict[int, tuple[str, Decoder, Encoder, Any]] = {}
    absent: list[tuple[str, Any]] = []
    for field in fields:
        name, _kind, versions, _n, tag = field[0], field[1], field[2], field[3], field[4]
        default = default_of(field, version)
        if tag is not None:
            if flexible and _in(versions, version):
                dec, enc = _field_codec(field, version, flexible)
                tagged[tag] = (name, dec, enc, default)
            else:
                absent.append((name, default))
        elif _in(versions, version):
            dec, enc = _field_codec(field, version, flexible)
            plain.append((name, dec, enc, default))
        else:
            absent.append((name, default))
    result = (
        _struct_decoder(plain, tagged, absent, flexible),
        _struct_encoder(plain, tagged, flexible),
    )
    _CACHE[key] = result
    return result


def _struct_decoder(
    plain: list[tuple[str, Decoder, Encoder, Any]],
    tagged: dict[int, tuple[str, Decoder, Encoder, Any]],
    absent: list[tuple[str, Any]],
    flexible: bool,
) -> Decoder:
    steps = [(name, dec) for name, dec, _e, _d in plain]
    defaults = absent + [(name, d) for name, _dec, _e, d in tagged.values()]

    def dec(buf: Buffer, pos: int, items: Items) -> tuple[Any, int]:
        obj: dict[str, Any] = {}
        for name, default in defaults:
            obj[name] = _fresh(default)
        for name, step in steps:
            obj[name], pos = step(buf, pos, items)
        if flexible:
            # Almost every struct has no tagged field: one byte, 0, read here
            # without a call.
            if pos < len(buf) and buf[pos] == 0:
                pos += 1
            else:
                pos = _tagged(buf, pos, items, tagged, obj)
        return obj, pos

    return dec


def _tagged(
    buf: Buffer,
    pos: int,
    items: Items,
    tagged: dict[int, tuple[str, Decoder, Encoder, Any]],
    obj: dict[str, Any],
) -> int:
    """A struct's tagged section into ``obj``; where it ends."""
    count, pos = read_uvarint(buf, pos)
    last = -1
    view: memoryview | None = None
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        # Kafka writes tags in increasing order, each once: a repeated tag
        # would decode its field again (a frame of nothing but tag 0 held
        # a node for seconds), so anything else is refused.
        if tag <= last:
            raise KafkaDecodeError(f"tagged field {tag} after {last}: repeated or out of order")
        last = tag
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise KafkaDecodeError("tagged field runs past the message")
        known = tagged.get(tag)
        if known is not None:
            # Decoded within its size: a view cut at its end (no copy).
            if view is None:
                view = buf if isinstance(buf, memoryview) else memoryview(buf)
            obj[known[0]], at = known[1](view[:end], pos, items)
            if at != end:
                raise KafkaDecodeError(f"tagged field {tag} is {size} bytes, its value {at - pos}")
        pos = end
    return pos


def _struct_encoder(
    plain: list[tuple[str, Decoder, Encoder, Any]],
    tagged: dict[int, tuple[str, Decoder, Encoder, Any]],
    flexible: bool,
) -> Encoder:
    steps = [(name, enc, default) for name, _d, enc, default in plain]
    tags = sorted((tag, name, enc, default) for tag, (name, _d, enc, default) in tagged.items())

    def enc(obj: Any, out: bytearray) -> None:
        get = obj.get
        for name, step, default in steps:
            step(get(name, default), out)
        if flexible:
            present = []
            for tag, name, step, default in tags:
                value = get(name, default)
                if value != default:
                    body = bytearray()
                    step(value, body)
                    present.append((tag, body))
            write_uvarint(len(present), out)
            for tag, body in present:
                write_uvarint(tag, out)
                write_uvarint(len(body), out)
                out += body

    return enc


def _fresh(default: Any) -> Any:
    """A default that a handler may change without changing the next message's."""
    if isinstance(default, list):
        return []
    if isinstance(default, dict):
        return {k: _fresh(v) for k, v in default.items()}
    return default

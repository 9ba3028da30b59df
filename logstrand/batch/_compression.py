"""Batch bodies: the keys, payloads (and extras) of a packed batch, their lengths, and
the codecs a log may compress them with (``logs create --compression``).
Clients compress when they append and readers decompress; sequencers and
storage nodes never do (the body checksum covers the compressed bytes).
Pure; the codec libraries load on first use.
"""

from __future__ import annotations

import enum
import itertools
import struct
from typing import TYPE_CHECKING

import google_crc32c

from ..errors import InvalidArgumentError, ProtocolError

if TYPE_CHECKING:
    from collections.abc import Sequence


class Codec(enum.IntEnum):
    """How a body's blob is compressed (a log attribute, applied by clients)."""

    NONE = 0
    LZ4 = 1
    ZSTD = 2

    @classmethod
    def parse(cls, name: str) -> Codec:
        try:
            return cls[name.upper()]
        except KeyError:
            choices = "|".join(c.name.lower() for c in cls)
            raise InvalidArgumentError(f"compression {name!r} is not one of {choices}") from None


def compress(codec: int, raw: bytes) -> bytes:
    if codec == Codec.LZ4:
        import lz4.block

        return bytes(lz4.block.compress(raw, store_size=False))
    if codec == Codec.ZSTD:
        import zstandard

        return bytes(zstandard.ZstdCompressor(level=3).compress(raw))
    return raw


def decompress(codec: int, blob: bytes, raw_len: int) -> bytes:
    try:
        if codec == Codec.LZ4:
            import lz4.block

            raw = lz4.block.decompress(blob, uncompressed_size=raw_len)
        elif codec == Codec.ZSTD:
            import zstandard

            raw = zstandard.ZstdDecompressor().decompress(blob, max_output_size=raw_len)
        else:
            raw = blob
    except Exception as exc:  # the libraries raise their own error types
        raise ProtocolError(f"batch body does not decompress: {exc}") from None
    if len(raw) != raw_len:
        raise ProtocolError(f"batch body decompressed to {len(raw)} bytes, not {raw_len}")
    return bytes(raw)


def pack_body(
    keys: Sequence[bytes | None],
    payloads: Sequence[bytes | None],
    codec: int = Codec.NONE,
    extras: Sequence[bytes | None] | None = None,
) -> tuple[bytes, int, int, int]:
    """(body, raw_len, crc32c, codec used) of records' keys and payloads, and
    their ``extras`` when given (a third length per record, the extras after
    the payloads: the batch then has layout bit ``EXTRAS``).

    A compressed blob that is not smaller than the raw one is kept raw (codec
    NONE): incompressible payloads cost no decompression on reads.
    """
    if len(keys) != len(payloads) or (extras is not None and len(extras) != len(payloads)):
        raise InvalidArgumentError("keys, payloads and extras differ in length")
    lens = [-1 if k is None else len(k) for k in keys]
    lens += [-1 if p is None else len(p) for p in payloads]
    parts = [k for k in keys if k]
    parts += [p for p in payloads if p]
    if extras is not None:
        lens += [-1 if x is None else len(x) for x in extras]
        parts += [x for x in extras if x]
    return seal_body(struct.pack(f"<{len(lens)}i", *lens), parts, codec)


def seal_body(
    lengths: bytes, parts: Sequence[bytes | memoryview], codec: int = Codec.NONE
) -> tuple[bytes, int, int, int]:
    """``pack_body`` of a lengths table packed already and the records'
    bytes in ``parts`` (their concatenation is the raw blob): one copy of the
    bytes when they are kept raw.  A compressed blob that is not smaller than
    the raw one is kept raw (codec NONE)."""
    raw_len = sum(map(len, parts))
    if codec != Codec.NONE and raw_len:
        raw = b"".join(parts)
        blob = compress(codec, raw)
        if len(blob) < raw_len:
            body = lengths + blob
            return body, raw_len, google_crc32c.value(body), int(codec)
    body = b"".join((lengths, *parts))
    return body, raw_len, google_crc32c.value(body), int(Codec.NONE)


def slices(blob: bytes, lens: list[int], at: int) -> tuple[list[bytes | None], int]:
    """Consecutive pieces of ``blob`` from ``at`` (length -1: None), and where
    they end; without a Python loop when no piece is None."""
    if lens.count(-1) == len(lens):
        return [None] * len(lens), at
    if -1 not in lens:
        pos = list(itertools.accumulate(lens, initial=at))
        return list(map(blob.__getitem__, map(slice, pos[:-1], pos[1:]))), pos[-1]
    out: list[bytes | None] = []
    for n in lens:
        if n < 0:
            out.append(None)
        else:
            out.append(blob[at : at + n])
            at += n
    return out, at

"""Compression of batch bodies: the codecs a log may use (``logs create
--compression``).  Clients compress when they append and readers decompress;
sequencers and storage nodes never do (the body checksum covers the
compressed bytes).  Pure; the codec libraries load on first use.
"""

from __future__ import annotations

import enum

from .errors import InvalidArgumentError, ProtocolError


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

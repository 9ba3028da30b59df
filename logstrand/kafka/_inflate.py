"""Kafka's codecs (gzip, snappy, lz4, zstd) both ways.  Decompressing what
producers send, within a bound: each stopped at ``limit`` bytes of output,
whatever the data says of its own size.  Compressing what a fetch sends, in
the forms every Kafka client reads (``compress``).  Pure."""

from __future__ import annotations

import io
import struct
import zlib

from ._codec import KafkaDecodeError

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_IDS = {name: i for i, name in CODECS.items()}
#: xerial's snappy framing (Kafka's Java clients and brokers write it; every
#: client reads it): magic, version 1, compatible version 1, then blocks.
_XERIAL = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


class UnsupportedCodec(KafkaDecodeError):
    pass


class TooLarge(KafkaDecodeError):
    """Records that would take more than the room they were given."""


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """``data`` decompressed, at most ``limit`` bytes (else ``TooLarge``)."""
    if codec == 0:
        return data
    try:
        if codec == 1:
            out = _gunzip(data, limit)
        elif codec == 3:
            import lz4.frame

            out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=limit + 1)
        elif codec == 4:
            import zstandard

            # A frame's own content size is not to be trusted: read at most
            # ``limit + 1`` bytes of it.
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
            out = reader.read(limit + 1)
        elif codec == 2:
            out = _snappy(data, limit)
        else:
            raise UnsupportedCodec(f"compression codec {codec} is not Kafka's")
    except (UnsupportedCodec, TooLarge):
        raise
    except Exception as exc:
        name = CODECS.get(codec, codec)
        raise KafkaDecodeError(f"{name} data does not decompress: {exc}") from exc
    if len(out) > limit:
        raise TooLarge(f"{CODECS[codec]} data decompresses to more than {limit} bytes")
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with Kafka codec ``codec`` (0: as it is).  The
    fastest level of each: a front compresses each answer it sends, so speed
    matters more than the last bytes."""
    if codec == 0:
        return data
    if codec == 1:
        c = zlib.compressobj(1, wbits=31)  # gzip, one member
        return c.compress(data) + c.flush()
    if codec == 2:
        import cramjam

        blocks = [_XERIAL]
        for at in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[at : at + _XERIAL_BLOCK]))
            blocks.append(struct.pack(">i", len(block)) + block)
        return b"".join(blocks)
    if codec == 3:
        import lz4.frame

        # Independent blocks and no content size: what Kafka's own LZ4 frames
        # are (KIP-57), which its Java clients' reader requires.
        return bytes(lz4.frame.compress(data, block_linked=False, store_size=False))
    if codec == 4:
        import zstandard

        return bytes(zstandard.ZstdCompressor(level=1).compress(data))
    raise UnsupportedCodec(f"compression codec {codec} is not Kafka's")


def _gunzip(data: bytes, limit: int) -> bytes:
    """gzip members one after another, at most ``limit + 1`` bytes of them."""
    out = bytearray()
    rest = data
    while rest and len(out) <= limit:
        member = zlib.decompressobj(wbits=31)
        out += member.decompress(rest, limit + 1 - len(out))
        if member.unconsumed_tail:  # stopped at the limit
            break
        if not member.eof:
            raise KafkaDecodeError("truncated gzip data")
        rest = member.unused_data
    return bytes(out)


def _snappy(data: bytes, limit: int) -> bytes:
    try:
        import cramjam
    except ImportError as exc:
        raise UnsupportedCodec("snappy needs the cramjam package on the front") from exc

    def block(raw: bytes) -> bytes:
        # A raw snappy block says its length first: checked before it is made.
        if cramjam.snappy.decompress_raw_len(raw) > limit:
            raise TooLarge(f"snappy data decompresses to more than {limit} bytes")
        return bytes(cramjam.snappy.decompress_raw(raw))

    # Kafka's Java clients frame snappy the way xerial's library does.
    if data[:8] == b"\x82SNAPPY\x00":
        out = bytearray()
        pos = 16
        while pos + 4 <= len(data) and len(out) <= limit:
            (n,) = struct.unpack_from(">i", data, pos)
            out += block(data[pos + 4 : pos + 4 + n])
            pos += 4 + n
        return bytes(out)
    return block(data)

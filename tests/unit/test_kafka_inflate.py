"""Producers' records decoded within a bound (``kafka._inflate``,
``kafka._records``): every codec stops at its limit whatever the data says
of its size, and a partition's records take at most the room they are given."""

from __future__ import annotations

import gzip
import io

import cramjam
import lz4.frame
import pytest
import zstandard

from logstrand.kafka._inflate import TooLarge, decompress
from logstrand.kafka._records import RECORD_BYTES, decode_batches
from logstrand.kafka._records_encode import encode_columns

MIB = 1024 * 1024
BOMB = b"\x00" * (8 * MIB)


def _zstd_lying() -> bytes:
    """A frame whose header claims 10 bytes of content and holds 8 MiB."""
    real = zstandard.ZstdCompressor(write_content_size=False).compress(BOMB)
    return real


@pytest.mark.parametrize(
    ("codec", "data"),
    [
        # mtime=0: a gzip header holds the time it was made, and the test's
        # id holds the data: two xdist workers that collect in different
        # seconds would collect different tests (and the run stops).
        (1, gzip.compress(BOMB, mtime=0)),
        (1, gzip.compress(BOMB[:100], mtime=0) + gzip.compress(BOMB, mtime=0)),  # two members
        (2, bytes(cramjam.snappy.compress_raw(BOMB))),
        (3, lz4.frame.compress(BOMB)),
        (4, zstandard.ZstdCompressor().compress(BOMB)),
        (4, _zstd_lying()),
    ],
    ids=["gzip", "gzip-two-members", "snappy", "lz4", "zstd", "zstd-lying-size"],
)
def test_every_codec_stops_at_its_limit(codec: int, data: bytes) -> None:
    assert len(data) < len(BOMB) // 16  # a bomb: far less than it holds
    with pytest.raises(TooLarge):
        decompress(codec, data, MIB)
    assert len(decompress(codec, data, 16 * MIB)) >= 100


def test_xerial_snappy_chunks_are_bounded_too() -> None:
    chunk = bytes(cramjam.snappy.compress_raw(BOMB[: 2 * MIB]))
    framed = b"\x82SNAPPY\x00" + b"\x00" * 8 + (len(chunk).to_bytes(4, "big") + chunk) * 4
    with pytest.raises(TooLarge):
        decompress(2, framed, 3 * MIB)
    assert len(decompress(2, framed, 16 * MIB)) == 8 * MIB


def test_a_partition_s_records_take_at_most_their_room() -> None:
    """10,000 empty records in a zstd batch of 30 KB: their cost (bytes plus
    RECORD_BYTES each, a megabyte) is counted and bounded."""
    from .test_kafka_codec import _their_batch

    data = _their_batch(4, [(i, None, b"", []) for i in range(10_000)])
    assert len(data) < 64 * 1024
    (batch,) = decode_batches(data, 10_000 * (RECORD_BYTES + 16))
    assert 10_000 * RECORD_BYTES < batch.cost <= 10_000 * (RECORD_BYTES + 16)
    with pytest.raises(TooLarge):
        decode_batches(data, 10_000 * RECORD_BYTES // 2)
    plain = encode_columns(list(range(100)), [0] * 100, [None] * 100, [b"v"] * 100)
    (one,) = decode_batches(plain, 1 << 20)
    assert one.cost >= 100 * RECORD_BYTES


def test_gzip_that_ends_early_is_corrupt_not_large() -> None:
    from logstrand.kafka._codec import KafkaDecodeError

    cut = gzip.compress(BOMB[:1000])[:-12]
    with pytest.raises(KafkaDecodeError) as err:
        decompress(1, cut, MIB)
    assert not isinstance(err.value, TooLarge)


def test_zstd_reads_no_further_than_it_may() -> None:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(_zstd_lying()))
    assert len(reader.read(MIB + 1)) == MIB + 1

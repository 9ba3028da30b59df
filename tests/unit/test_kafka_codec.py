"""The Kafka front's codec: messages compiled from Kafka's schemas, record
batches, and offsets.  Record batches are checked against kafka-python's own
encoder and decoder, an implementation written apart from this one."""

from __future__ import annotations

import contextlib
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import pack_extra, unpack_extra
from logstrand.kafka import _protocol as proto
from logstrand.kafka._codec import KafkaDecodeError, read_varint, write_varint
from logstrand.kafka._inflate import CODECS
from logstrand.kafka._offsets import OffsetMap, epoch_end
from logstrand.kafka._records import decode_batches
from logstrand.kafka._records_encode import encode_columns
from logstrand.types import compose_lsn

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

SERVED = {3: (0, 12), 18: (0, 3), 0: (3, 11), 1: (4, 12)}

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-._", min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(0, 12),
    topics=st.one_of(st.none(), st.lists(names, max_size=5)),
    auto=st.booleans(),
)
def test_metadata_requests_decode_to_what_was_encoded(
    version: int, topics: list[str] | None, auto: bool
) -> None:
    if version == 0 and topics is None:
        topics = []  # v0 has no null: an empty list means every topic
    body = {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": auto,
    }
    frame = proto.encode_request(3, version, 77, body, client_id="me")
    req = proto.decode_request(frame[4:], SERVED)
    assert (req.api_key, req.version, req.correlation_id, req.client_id) == (3, version, 77, "me")
    got = req.body["topics"]
    assert (None if got is None else [t["name"] for t in got]) == topics
    assert req.body["allow_auto_topic_creation"] == (auto if version >= 4 else True)


@settings(max_examples=40, deadline=None)
@given(version=st.integers(0, 12), port=st.integers(1, 65535), name=names)
def test_metadata_responses_survive_a_round_trip(version: int, port: int, name: str) -> None:
    body = {
        "brokers": [{"node_id": 1, "host": "h", "port": port, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": name,
                "topic_id": bytes(range(16)),
                "partitions": [
                    {
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 5,
                        "replica_nodes": [1, 2],
                        "isr_nodes": [1],
                        "offline_replicas": [],
                    }
                ],
            }
        ],
    }
    frame = proto.encode_response(3, version, 9, body)
    correlation, back = proto.decode_response(3, version, frame[4:])
    assert correlation == 9
    assert back["brokers"][0]["port"] == port
    part = back["topics"][0]["partitions"][0]
    assert back["topics"][0]["name"] == name
    assert part["replica_nodes"] == [1, 2]
    assert part["leader_epoch"] == (5 if version >= 7 else -1)


def test_an_api_versions_answer_has_header_v0_even_at_a_flexible_version() -> None:
    frame = proto.encode_response(18, 3, 5, {"error_code": 0, "api_keys": []})
    # size, correlation id, then the body at once: no tagged fields in the header
    assert frame[4:8] == b"\x00\x00\x00\x05"
    assert frame[8:10] == b"\x00\x00"


def test_unserved_versions_and_garbage_are_errors_not_crashes() -> None:
    frame = proto.encode_request(3, 12, 1, {"topics": None})[4:]
    with pytest.raises(proto.UnsupportedRequest):
        proto.decode_request(frame, {3: (0, 11)})
    for cut in range(len(frame)):
        with contextlib.suppress(KafkaDecodeError):
            proto.decode_request(frame[:cut], SERVED)


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_varints_round_trip(n: int) -> None:
    out = bytearray()
    write_varint(n, out)
    assert read_varint(bytes(out), 0) == (n, len(out))


def _their_batch(codec: int, records: list[tuple[int, bytes | None, bytes, list]]) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, key, value, headers in records:
        b.append(offset, timestamp=1_000 + offset, key=key, value=value, headers=headers)
    return bytes(b.build())


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_batches_kafka_python_makes_decode_with_every_codec(codec: int) -> None:
    records = [(i, b"k%d" % i if i % 3 else None, b"value %d" % i * 20, []) for i in range(50)]
    records[7] = (7, b"k7", b"v", [("trace", b"abc"), ("empty", None)])
    (batch,) = decode_batches(_their_batch(codec, records))
    assert batch.codec == ("none", "gzip", "snappy", "lz4", "zstd")[codec]
    assert [(r.offset_delta, r.key, r.value) for r in batch.records] == [
        (o, k, v) for o, k, v, _ in records
    ]
    assert batch.records[7].headers == (("trace", b"abc"), ("empty", None))
    # The append path's columns say the same, with every record's headers
    # and create time packed as its extras.
    assert batch.keys == [k for _, k, _, _ in records]
    assert batch.values == [v for _, _, v, _ in records]
    assert [unpack_extra(x) for x in batch.extras] == [
        (1_000 + i, tuple(h)) for i, _, _, h in records
    ]
    for cut in range(61, len(_their_batch(0, records)), 97):
        with pytest.raises(KafkaDecodeError):
            decode_batches(_their_batch(0, records)[:cut])
    assert [r.timestamp_ms for r in batch.records] == [1_000 + i for i in range(50)]


def test_a_batch_with_a_wrong_crc_or_length_is_refused() -> None:
    data = bytearray(_their_batch(0, [(0, b"k", b"v", [])]))
    data[-1] ^= 0x01
    with pytest.raises(KafkaDecodeError, match="CRC"):
        decode_batches(bytes(data))
    with pytest.raises(KafkaDecodeError):
        decode_batches(bytes(data[:-3]))


def test_offsets_are_dense_within_and_across_epochs() -> None:
    # Epoch 1 ended with its bridge at ESN 101 (records 1..100), epoch 2 was
    # empty, epoch 3 ended at ESN 51: epochs 3 and 4 start at 100 and 150.
    m = OffsetMap(((3, 100), (4, 150)), clean=3)
    assert m.offset(compose_lsn(1, 1)) == 0
    assert m.offset(compose_lsn(1, 100)) == 99
    assert m.offset(compose_lsn(3, 1)) == 100
    assert m.offset(compose_lsn(4, 1)) == 150
    assert m.lsn_at(0) == compose_lsn(1, 1)
    assert m.lsn_at(99) == compose_lsn(1, 100)
    assert m.lsn_at(100) == compose_lsn(3, 1)
    assert m.lsn_at(170) == compose_lsn(4, 21)
    assert m.next_offset(compose_lsn(4, 0)) == 150  # a new epoch, nothing in it yet
    assert m.next_offset(compose_lsn(4, 7)) == 157
    assert m.next_offset(0) == 0
    assert m.known(4)
    assert not m.known(5)


def test_an_epoch_ends_where_the_next_epoch_with_records_starts() -> None:
    """OffsetForLeaderEpoch's answer: (the epoch with records at or below
    the one asked, where it ends), the log end offset (here 170) for the
    newest and for any later one."""
    m = OffsetMap(((3, 100), (4, 150)), clean=3)
    assert epoch_end(m, 1, 170) == (1, 100)  # epoch 1, implicit at 0, ends at 3's base
    assert epoch_end(m, 2, 170) == (1, 100)  # 2 had nothing: 1 is the epoch below it
    assert epoch_end(m, 3, 170) == (3, 150)
    assert epoch_end(m, 4, 170) == (4, 170)
    assert epoch_end(m, 9, 170) == (9, 170)  # a sequencer that appended nothing yet
    assert epoch_end(m, -1, 170) == (-1, -1)
    # A log whose first records came in epoch 2: epoch 1 held nothing.
    assert epoch_end(OffsetMap(((2, 0),), clean=1), 1, 5) == (1, 0)
    assert epoch_end(OffsetMap((), clean=0), 1, 5) == (1, 5)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2], ids=["none", "gzip", "snappy"])
def test_message_sets_older_than_v2_decode(magic: int, codec: int) -> None:
    """What Produce v0-v2 carries (kafka-python's legacy encoder)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.legacy_records import LegacyRecordBatchBuilder

    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(20):
        b.append(i, timestamp=2_000 + i, key=b"k%d" % i if i % 2 else None, value=b"v%d" % i)
    (batch,) = decode_batches(bytes(b.build()))
    assert [(r.key, r.value) for r in batch.records] == [
        (b"k%d" % i if i % 2 else None, b"v%d" % i) for i in range(20)
    ]
    if magic == 1:
        assert [r.timestamp_ms for r in batch.records] == [2_000 + i for i in range(20)]
    data = bytearray(b.build())
    data[-1] ^= 0xFF
    with pytest.raises(KafkaDecodeError):
        decode_batches(bytes(data))


def test_batches_made_from_columns_decode_in_kafka_python() -> None:
    offsets = [7, 8, 10, 11 + 70_000]  # a gap, and an offset delta past the varint table
    stamps = [1_000, 1_001, 999, 1_000 + 100_000]
    keys = [b"k" * 300, None, b"", b"z"]
    values = [b"v" * 20_000, b"w", None, b""]
    data = encode_columns(offsets, stamps, keys, values)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value) for r in theirs]
    assert got == list(zip(offsets, stamps, keys, values, strict=True))
    assert theirs.timestamp_type == 0  # CreateTime: each record its own time
    (ours,) = decode_batches(data)
    assert (ours.base_offset, ours.last_offset_delta) == (7, 70_004)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_fetched_batch_in_each_codec_decodes_in_kafka_python(codec: int) -> None:
    """A topic's compression.type compresses what a fetch sends: the batch
    says its codec and leader epoch, and kafka-python (its own decoders for
    each codec) and the front's decoder both read the records back; snappy
    in xerial's framing, 100 KiB so that it spans several of its blocks."""
    n = 200
    offsets = list(range(40, 40 + n))
    values: list[bytes | None] = [b"value %d " % i * 60 for i in range(n)]
    keys: list[bytes | None] = [b"k%d" % i for i in range(n)]
    plain = encode_columns(offsets, [9_000] * n, keys, values, leader_epoch=3)
    data = encode_columns(offsets, [9_000] * n, keys, values, leader_epoch=3, codec=codec)
    assert len(data) < len(plain) // 4
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert (theirs.compression_type, theirs.leader_epoch) == (codec, 3)
    assert [(r.offset, r.key, r.value) for r in theirs] == list(
        zip(offsets, keys, values, strict=True)
    )
    (ours,) = decode_batches(data)
    assert (ours.codec, ours.base_offset, ours.values) == (CODECS[codec], 40, values)


def test_headers_and_create_times_from_extras_reach_kafka_python() -> None:
    """A fetch's batch gives each record the create time and headers its
    producer sent (its extras); a record with none shows the log's time."""
    offsets = [0, 1, 2, 3]
    log_times = [5_000, 5_000, 5_001, 5_002]
    extras = [
        pack_extra(1_234, [("trace", b"t1"), ("null", None)]),
        None,
        pack_extra(4_321),
        pack_extra(None, [("ü", b"")]),
    ]
    data = encode_columns(
        offsets, log_times, [b"a", None, b"c", None], [b"1", b"2", b"3", b"4"], extras
    )
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    got = [(r.timestamp, tuple(r.headers)) for r in theirs]
    assert got == [
        (1_234, (("trace", b"t1"), ("null", None))),
        (5_000, ()),
        (4_321, ()),
        (5_002, (("ü", b""),)),
    ]
    # And back through the produce path: the same extras, byte for byte,
    # but for the record that had none, which now has the time it showed.
    (ours,) = decode_batches(data)
    assert ours.extras[0] == extras[0]
    assert ours.extras[2] == extras[2]
    assert unpack_extra(ours.extras[1]) == (5_000, ())
    assert unpack_extra(ours.extras[3]) == (5_002, (("ü", b""),))

from __future__ import annotations

import contextlib
import struct
from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.batch import Codec, PackedBatch, make_batch
from logstrand.errors import InvalidArgumentError, ProtocolError, Status
from logstrand.wire import (
    MANY_MAX,
    MESSAGE_TYPES,
    TIER_READ_BYTES_MAX,
    Amend,
    AmendReply,
    Append,
    AppendMany,
    AppendManyReply,
    AppendReply,
    CleanPoint,
    ClusterState,
    Compact,
    CompactReply,
    Digest,
    DropCopies,
    DropReply,
    ErrorReply,
    FindTime,
    FindTimeReply,
    FrameDecoder,
    GetClusterState,
    GetDigest,
    GetLogDirectory,
    GetNodeStatus,
    GetSeqState,
    GetTails,
    Gossip,
    GroupHeartbeat,
    GroupHeartbeatReply,
    Hello,
    LogDirectory,
    LogInfo,
    LogInfoReply,
    NodeStatus,
    ReadCredit,
    ReadRecords,
    Release,
    ReleaseMany,
    Renew,
    RenewReply,
    Seal,
    SealReply,
    SeqState,
    StartRead,
    StopRead,
    Store,
    StoreMany,
    StoreReplies,
    StoreReply,
    TailsReply,
    TierRead,
    TierReadReply,
    Trim,
    TrimLog,
    TrimReply,
    TxnOp,
    TxnReply,
    TxnRequest,
    _codec,
    choose_version,
    decode_body,
    encode_body,
    encode_frame,
)

u16 = st.integers(0, 2**16 - 1)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
statuses = st.sampled_from([int(s) for s in Status])


@st.composite
def packed_batches(draw: st.DrawFn, max_size: int = 20) -> PackedBatch:
    """Stored batches: increasing LSNs in one epoch, any codec."""
    epoch = draw(st.integers(1, 2**32 - 1))
    esns = sorted(draw(st.sets(st.integers(1, 2**32 - 1), min_size=1, max_size=max_size)))
    n = len(esns)
    return make_batch(
        [(epoch << 32) | e for e in esns],
        draw(st.lists(st.none() | st.binary(max_size=200), min_size=n, max_size=n)),
        timestamps_ms=draw(st.lists(u64, min_size=n, max_size=n)),
        flags=draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)),
        keys=draw(st.lists(st.none() | st.binary(max_size=40), min_size=n, max_size=n)),
        wave=draw(u32),
        copyset=tuple(draw(st.lists(u32, min_size=1, max_size=5))),
        codec=draw(st.sampled_from(list(Codec))),
    )


@st.composite
def hellos(draw: st.DrawFn) -> Hello:
    lo = draw(u16)
    return Hello(
        lo,
        draw(st.integers(lo, 2**16 - 1)),
        draw(st.text(max_size=50)),
        draw(st.none() | u32),
        draw(st.none() | st.text(max_size=60)),
    )


# One strategy per message type; the test below fails when a type has none.
STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    Hello: hellos(),
    MESSAGE_TYPES[2]: st.builds(
        MESSAGE_TYPES[2], statuses, u16, st.none() | u32, st.text(max_size=60)
    ),
    MESSAGE_TYPES[3]: st.builds(MESSAGE_TYPES[3], u64),
    MESSAGE_TYPES[4]: st.builds(MESSAGE_TYPES[4], u64),
    ErrorReply: st.builds(ErrorReply, u64, statuses, st.text(max_size=100)),
    Append: st.builds(Append, u64, u64, packed_batches()),
    AppendReply: st.builds(
        AppendReply, u64, statuses, u64, u32, u64, st.none() | u32, st.text(max_size=30)
    ),
    Store: st.tuples(packed_batches(), st.booleans()).flatmap(
        lambda b_rebuilding: st.builds(
            Store,
            u64,
            u64,
            st.just(b_rebuilding[0].wave),
            st.just(b_rebuilding[0].copyset),
            u64,
            st.booleans(),
            st.just(b_rebuilding[0]),
            # Written by recovery or by rebuilding, never both.
            st.just(0) if b_rebuilding[1] else u32,
            st.just(b_rebuilding[1]),
        )
    ),
    GetDigest: st.builds(GetDigest, u64, u64, u32, u32, u32),
    Digest: (st.none() | packed_batches()).flatmap(
        lambda b: st.builds(
            Digest,
            u64,
            statuses,
            u32,
            st.booleans(),
            st.lists(u32, min_size=len(b or ()), max_size=len(b or ())).map(tuple),
            st.just(b),
        )
    ),
    StoreReply: st.builds(StoreReply, u64, u64, statuses, u32),
    Release: st.builds(Release, u64, u64),
    StartRead: st.builds(
        StartRead,
        u64,
        u32,
        u64,
        u64,
        u64,
        u32,
        st.booleans(),
        st.lists(u32, max_size=5).map(tuple),
    ),
    ReadCredit: st.builds(ReadCredit, u64, u32, u32),
    StopRead: st.builds(StopRead, u64),
    ReadRecords: st.lists(packed_batches(max_size=5), max_size=3).flatmap(
        lambda bs: st.builds(
            ReadRecords,
            u64,
            u32,
            statuses,
            u64,
            u64,
            st.just(tuple(bs)),
            st.lists(u64, min_size=2 * len(bs), max_size=2 * len(bs)).map(tuple),
            u64,
            # The trailing field, set or at its default (then not sent).
            local_floor=st.one_of(st.just(0), u64),
        )
    ),
    LogInfo: st.builds(LogInfo, u64, u64),
    LogInfoReply: st.builds(LogInfoReply, u64, statuses, u64, u64, u64, u64, u64, u64, u64),
    FindTime: st.builds(FindTime, u64, u64, u64),
    FindTimeReply: st.builds(FindTimeReply, u64, statuses, u64),
    GetSeqState: st.builds(GetSeqState, u64, u64),
    SeqState: st.builds(
        SeqState,
        u64,
        statuses,
        u64,
        u32,
        st.booleans(),
        u64,
        st.booleans(),
        u32,
        st.text(max_size=20),
        st.text(max_size=20),
        u64,
    ),
    Seal: st.builds(Seal, u64, u64, u32),
    Trim: st.builds(Trim, u64, u64, u64),
    TrimLog: st.builds(TrimLog, u64, u64, u64),
    TrimReply: st.builds(TrimReply, u64, statuses, u32, u64),
    Amend: st.tuples(u64, u64).flatmap(
        lambda r: st.builds(
            Amend,
            u64,
            u64,
            st.just(min(r)),
            st.just(max(r)),
            st.lists(u32, max_size=5).map(tuple),
            st.lists(u32, min_size=1, max_size=5, unique=True).map(tuple),
        )
    ),
    AmendReply: st.builds(AmendReply, u64, statuses, u32, u32),
    GetNodeStatus: st.builds(GetNodeStatus, u64),
    NodeStatus: st.builds(
        NodeStatus, u64, statuses, u32, u32, u64, u32, st.lists(u64, max_size=5).map(tuple), u32
    ),
    SealReply: st.builds(SealReply, u64, statuses, u32, u32),
    GetLogDirectory: st.builds(GetLogDirectory, u64, u64),
    GetTails: st.builds(GetTails, u64, st.lists(u64, max_size=8).map(tuple)),
    AppendMany: st.integers(0, 3).flatmap(
        lambda n: st.builds(
            AppendMany,
            u64,
            st.lists(u64, min_size=n, max_size=n).map(tuple),
            st.lists(packed_batches(), min_size=n, max_size=n).map(tuple),
        )
    ),
    AppendManyReply: st.integers(0, 3).flatmap(
        lambda n: st.builds(
            AppendManyReply,
            u64,
            st.lists(statuses, min_size=n, max_size=n).map(tuple),
            st.lists(u64, min_size=n, max_size=n).map(tuple),
            st.lists(u64, min_size=n, max_size=n).map(tuple),
            st.lists(u32, min_size=n, max_size=n).map(tuple),
            st.lists(st.text(max_size=10), min_size=n, max_size=n).map(tuple),
        )
    ),
    Renew: st.builds(Renew, u64, st.lists(u64, max_size=8).map(tuple)),
    RenewReply: st.builds(RenewReply, u64, statuses, st.lists(u32, max_size=8).map(tuple)),
    TailsReply: st.builds(
        TailsReply, u64, statuses, st.lists(u64, max_size=4).map(lambda v: tuple(v * 4))
    ),
    GroupHeartbeat: st.builds(
        GroupHeartbeat,
        u64,
        st.from_regex(r"[a-z][a-z0-9.]{0,20}", fullmatch=True),
        st.text(max_size=64),
        st.integers(-2, 2**40),
        st.none() | st.text(max_size=20),
        st.booleans(),
        st.lists(u64, max_size=8).map(tuple),
        st.none() | st.lists(u32, max_size=8).map(tuple),
    ),
    GroupHeartbeatReply: st.builds(
        GroupHeartbeatReply,
        u64,
        statuses,
        u32,
        st.text(max_size=30),
        st.text(max_size=64),
        st.integers(-2, 2**40),
        u32,
        st.none() | st.lists(u32, max_size=8).map(tuple),
    ),
    TxnRequest: st.builds(
        TxnRequest,
        u64,
        st.sampled_from(list(TxnOp)).map(int),
        st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
        st.integers(-1, 2**40),
        st.integers(-1, 32767),
        u32,
        st.lists(st.integers(1, 2**40), max_size=8).map(tuple),
        st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), max_size=3).map(tuple),
        st.text(max_size=40),
    ),
    TierRead: st.tuples(u64, u64).flatmap(
        lambda lo_hi: st.builds(
            TierRead,
            u64,
            u64,
            st.just(min(lo_hi)),
            st.just(max(lo_hi)),
            st.integers(1, TIER_READ_BYTES_MAX),
        )
    ),
    TierReadReply: st.lists(packed_batches(max_size=5), max_size=3).flatmap(
        lambda bs: st.builds(
            TierReadReply,
            u64,
            statuses,
            u64,
            u64,
            st.just(tuple(bs)),
            st.lists(u64, min_size=2 * len(bs), max_size=2 * len(bs)).map(tuple),
            st.lists(st.tuples(st.integers(0, 8), u64, u64), max_size=4).map(
                lambda gs: tuple(x for g in gs for x in g)
            ),
            st.text(max_size=30),
        )
    ),
    TxnReply: st.builds(
        TxnReply,
        u64,
        statuses,
        u32,
        st.text(max_size=30),
        st.integers(-1, 2**40),
        st.integers(-1, 9),
    ),
    Compact: st.builds(Compact, u64, u64),
    CompactReply: st.builds(CompactReply, u64, statuses, st.text(max_size=20)),
    DropCopies: st.builds(
        DropCopies,
        u64,
        u64,
        u64,
        u64,
        st.integers(-(2**63), 2**63 - 1),
        u64,
        st.binary(max_size=48),
    ),
    DropReply: st.builds(DropReply, u64, statuses, u32, u64, u64, u64, u64, u64),
    CleanPoint: st.builds(CleanPoint, u64, u64),
    LogDirectory: st.builds(
        LogDirectory, u64, statuses, st.lists(u64, max_size=3).map(lambda xs: tuple(xs * 6))
    ),
    Gossip: st.builds(
        Gossip,
        u32,
        st.lists(st.tuples(u32, u32), max_size=5).map(lambda ps: tuple(x for p in ps for x in p)),
        st.booleans(),
    ),
    GetClusterState: st.builds(GetClusterState, u64),
    ClusterState: st.builds(
        ClusterState,
        u64,
        statuses,
        st.lists(u32, max_size=4).map(tuple),
        st.lists(u32, max_size=4).map(tuple),
    ),
}


def _plain_store(b: PackedBatch) -> st.SearchStrategy[Store]:
    return st.builds(
        Store, u64, u64, st.just(b.wave), st.just(b.copyset), u64, st.booleans(), st.just(b)
    )


STRATEGIES[StoreMany] = st.lists(
    packed_batches(max_size=3).flatmap(_plain_store), min_size=1, max_size=4
).map(StoreMany.of)
STRATEGIES[StoreReplies] = st.lists(
    st.builds(StoreReply, u64, u64, statuses, st.just(0)), min_size=0, max_size=4
).flatmap(lambda rs: st.builds(StoreReplies.of, u32, st.just(rs)))
STRATEGIES[ReleaseMany] = st.lists(st.tuples(u64, u64), max_size=4).map(
    lambda ps: ReleaseMany(tuple(p[0] for p in ps), tuple(p[1] for p in ps))
)
any_message = st.one_of(*STRATEGIES.values())


def test_every_message_type_has_a_strategy() -> None:
    assert set(STRATEGIES) == set(MESSAGE_TYPES.values())


@given(any_message)
def test_round_trip_every_message(msg: Any) -> None:
    assert decode_body(encode_body(msg)) == msg
    dec = FrameDecoder()
    dec.feed(encode_frame(msg))
    assert dec.next_message() == msg
    assert dec.next_message() is None


@given(st.lists(any_message, max_size=8), st.data())
def test_decoder_handles_any_split_of_a_stream(msgs: list[Any], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(m) for m in msgs)
    dec = FrameDecoder()
    got: list[Any] = []
    pos = 0
    while pos < len(stream):
        step = data.draw(st.integers(1, max(1, len(stream) - pos)))
        dec.feed(stream[pos : pos + step])
        pos += step
        got.extend(dec.messages())
    assert got == msgs
    assert dec.buffered_bytes == 0


@given(st.binary(max_size=2000))
def test_random_bytes_only_ever_raise_protocol_error(data: bytes) -> None:
    dec = FrameDecoder(frame_bytes_max=1 << 16)
    dec.feed(data)
    with contextlib.suppress(ProtocolError):
        dec.messages()
    with contextlib.suppress(ProtocolError):
        decode_body(data)


@given(any_message, st.data())
def test_corrupted_frames_only_ever_raise_protocol_error(msg: Any, data: st.DataObject) -> None:
    body = bytearray(encode_body(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    for candidate in (bytes(body), bytes(body[:cut])):
        with contextlib.suppress(ProtocolError):
            decode_body(candidate)


def test_oversized_frame_is_refused_before_buffering() -> None:
    dec = FrameDecoder(frame_bytes_max=100)
    dec.feed((101).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="exceeds"):
        dec.next_message()


def test_encoding_an_oversized_message_is_toobig() -> None:
    batch = make_batch([(1 << 32) | 1], [b"x" * 1000], timestamps_ms=0)
    big = Append(1, 1, batch)
    with pytest.raises(InvalidArgumentError) as info:
        encode_frame(big, frame_bytes_max=500)
    assert info.value.status is Status.TOOBIG


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xa0",  # a map, not an array
        b"\x80",  # empty array
        b"\x82\x19\x03\xe7\x01",  # unknown type 999
        b"\x81\x03",  # Ping without its field
        b"\x83\x03\x01\x02",  # Ping with an extra field
        b"\x82\x03\x20",  # Ping with a negative id
        b"\x82\x03\xc1\x01",  # a CBOR tag where an int belongs
        b"\x82\x06\x41\x00",  # type 6: Records, retired (the old batch format)
    ],
)
def test_malformed_bodies(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_body(body)


def test_messages_validate_at_construction() -> None:
    with pytest.raises(ValueError, match="u64"):
        MESSAGE_TYPES[3](-1)
    with pytest.raises(ValueError, match="protocol_min"):
        Hello(3, 2, "c")
    with pytest.raises(ValueError, match="status"):
        ErrorReply(1, 999)
    assert attrs.has(Append)


def test_directory_entries_come_whole() -> None:
    with pytest.raises(ValueError, match="whole number"):
        LogDirectory(1, 0, (1, 2, 3))


@given(st.lists(packed_batches(max_size=3).flatmap(_plain_store), min_size=1, max_size=5))
def test_many_logs_stores_are_each_the_store_it_stands_for(stores: list[Store]) -> None:
    """A ``StoreMany`` gives back, after the wire, the very STOREs it was
    made of; its answers do the same for their replies."""
    msg = decode_body(encode_body(StoreMany.of(stores)))
    assert msg.stores() == stores
    replies = [StoreReply(s.store_id, s.log_id, int(Status.OK), 7) for s in stores]
    assert decode_body(encode_body(StoreReplies.of(7, replies))).replies() == replies


def test_many_logs_messages_refuse_what_they_cannot_carry() -> None:
    b = make_batch([(3 << 32) | 1], [b"x"], timestamps_ms=[1], copyset=(1, 2), wave=1)
    recovery = Store.of(1, 5, 1, (1, 2), 0, True, b, recovery_seal=4)
    with pytest.raises(ValueError, match="only plain STOREs"):
        StoreMany.of([recovery])
    with pytest.raises(ValueError, match="no entries"):
        StoreMany((), (), (), (), ())
    with pytest.raises(ValueError, match="differ in length"):
        StoreMany((1, 2), (5,), (0, 0), (True, True), (b, b))
    with pytest.raises(ValueError, match="differ in length"):
        ReleaseMany((1, 2), (5,))
    too_many = tuple(range(MANY_MAX + 1))
    with pytest.raises(ValueError, match="at most"):
        ReleaseMany(too_many, too_many)
    # Off the wire, the same refusals are protocol errors.
    with pytest.raises(ProtocolError, match="differ in length"):
        decode_body(cbor2.dumps([ReleaseMany.TYPE_ID, [1, 2], [5]]))


def test_version_negotiation() -> None:
    assert choose_version(1, 11) == 10
    assert choose_version(3, 9) == 9  # a node that does not say its local floor
    assert choose_version(3, 8) == 8  # a node without TierRead
    assert choose_version(3, 7) == 7  # a node without TxnRequest
    assert choose_version(3, 6) == 6  # a node without GroupHeartbeat
    assert choose_version(3, 5) == 5  # a node without StoreMany
    assert choose_version(3, 4) == 4  # a node without Renew
    assert choose_version(3, 3) == 3  # a node without GetTails and AppendMany
    assert choose_version(11, 12) is None
    assert choose_version(1, 2) is None


def test_a_retired_type_number_is_never_given_again() -> None:
    from logstrand.wire._registry import RETIRED, message

    assert 6 in RETIRED
    assert 6 not in MESSAGE_TYPES
    with pytest.raises(AssertionError, match="used twice"):
        message(6)(type("Again", (), {}))


@given(any_message)
def test_the_piecewise_body_is_what_cbor2_writes(msg: Any) -> None:
    """Messages whose byte strings are big are written piece by piece
    (``_codec._body_parts``), each byte string joined once: the bytes must be
    cbor2's, whatever the message (so that every decoder takes them)."""
    values = _codec._values(msg)
    assert b"".join(_codec._body_parts(values)) == cbor2.dumps(values)


def test_a_frame_of_big_batches_is_cbor2s_frame_and_decodes() -> None:
    pbs = tuple(
        make_batch(range(1 + 100 * i, 101 + 100 * i), [bytes([i]) * 10240] * 100, timestamps_ms=5)
        for i in range(3)
    )
    msg = ReadRecords(7, 1, 0, 301, 0, pbs, (1, 100, 101, 200, 201, 300))
    frame = encode_frame(msg)
    body = cbor2.dumps(_codec._values(msg))
    assert frame == struct.pack(">I", len(body)) + body
    dec = FrameDecoder()
    dec.feed(frame)
    assert dec.next_message() == msg


def test_trailing_fields_at_their_default_are_not_sent() -> None:
    """A field added at a message's end reaches a peer of an older protocol
    (which refuses a message with more fields than it knows) only when it
    says something: a ``ReadRecords`` with no local floor is what a reader
    of protocol 9 decodes."""
    plain = ReadRecords(1, 1, 0, 5, 0)
    body = encode_body(plain)
    assert decode_body(body) == plain
    assert len(cbor2.loads(body)) == 1 + 5  # the type and the fields without a default
    floored = ReadRecords(1, 1, 0, 5, 0, local_floor=4)
    assert len(cbor2.loads(encode_body(floored))) == 1 + len(attrs.fields(ReadRecords))
    assert decode_body(encode_body(floored)) == floored

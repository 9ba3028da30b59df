"""Packed batches: the format, its checksums, compression, and LogsDB's
stored batches where trims, compaction and recovery cut through them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import Codec, PackedBatch, make_batch, pack_body, pack_extra, unpack_extra
from logstrand.client._columns import ColumnBatch
from logstrand.client._reader_core import RecordRun
from logstrand.client._views import BatchView
from logstrand.epochstore import LogAttributes
from logstrand.errors import CorruptionError, InvalidArgumentError, ProtocolError, Status
from logstrand.logsdb import LogsDB, PutBatch
from logstrand.records import HOLE, WRITTEN_BY_RECOVERY
from logstrand.sequencer._host import HostOptions, check_records
from logstrand.storage._rules import cut_to_windows, donation_windows, servable_windows

if TYPE_CHECKING:
    from pathlib import Path

E1 = 1 << 32


def records(lsns: list[int], *, keyed: bool = False, ts: int = 1000) -> PackedBatch:
    keys = [b"k%d" % (n % 7) for n in lsns] if keyed else None
    payloads = [b'{"n": %d, "name": "record", "tags": ["a", "b"]}' % n for n in lsns]
    return make_batch(lsns, payloads, timestamps_ms=ts, keys=keys)


def pack(pb: PackedBatch, **header: Any) -> PackedBatch:
    """The same records packed again (another wave, copyset or codec)."""
    c = pb.columns()
    return make_batch(
        c.lsns,
        c.payloads,
        timestamps_ms=c.timestamps_ms,
        keys=c.keys,
        flags=c.flags,
        extras=c.extras,
        **header,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.none() | st.binary(max_size=300), min_size=1, max_size=40),
    st.booleans(),
    st.sampled_from(list(Codec)),
)
def test_every_codec_round_trips(payloads: list[bytes | None], keyed: bool, codec: Codec) -> None:
    n = len(payloads)
    keys = [None if i % 3 == 0 else b"key%d" % i for i in range(n)] if keyed else None
    rb = make_batch([E1 + 1 + i for i in range(n)], payloads, timestamps_ms=5, keys=keys)
    pb = pack(rb, wave=2, copyset=(1, 2), codec=codec)
    again = PackedBatch.parse(pb.data)
    assert again.body_ok()
    assert again.columns().payloads == rb.columns().payloads
    assert again.columns().keys == rb.columns().keys
    assert again.payload_bytes == sum(len(p) for p in payloads if p is not None)


_SLOTS = PackedBatch.__slots__


@given(
    st.lists(st.tuples(st.none() | st.binary(max_size=50), st.none() | st.binary(max_size=200))),
    st.sampled_from(list(Codec)),
    st.none() | st.tuples(st.integers(1, 2**63), st.integers(0, 2**31)),
    st.booleans(),
)
def test_a_client_s_batch_is_what_parsing_its_bytes_gives(
    records: list[tuple[bytes | None, bytes | None]],
    codec: Codec,
    producer: tuple[int, int] | None,
    headers: bool,
) -> None:
    """``for_append`` makes the batch field by field instead of parsing
    the bytes it just built: the same object as ``parse`` would make."""
    keys, payloads = [k for k, _ in records], [p for _, p in records]
    extras = [pack_extra(7, [("h", k)]) for k in keys] if headers else None
    if not records:
        with pytest.raises(ProtocolError):
            PackedBatch.for_append(keys, payloads, codec, producer, extras)
        return
    built = PackedBatch.for_append(keys, payloads, codec, producer, extras)
    parsed = PackedBatch.parse(built.data)
    for name in _SLOTS:
        assert getattr(built, name) == getattr(parsed, name), name
    assert built.keys_payloads() == (keys, payloads)
    assert built.body_ok()


def test_compression_shrinks_json_and_is_skipped_when_it_does_not_help() -> None:
    rb = records(list(range(E1 + 1, E1 + 501)))
    plain = pack(rb)
    for codec in (Codec.LZ4, Codec.ZSTD):
        packed = pack(rb, codec=codec)
        assert packed.codec == codec
        assert len(packed.data) < 0.5 * len(plain.data)
        assert packed.columns() == plain.columns()
    noise = make_batch([E1 + 1], [os.urandom(2000)], timestamps_ms=1)
    assert pack(noise, codec=Codec.ZSTD).codec == Codec.NONE
    with pytest.raises(InvalidArgumentError, match=r"lz4|zstd"):
        Codec.parse("gzip")


@pytest.mark.parametrize("extras", [False, True], ids=["plain", "with-extras"])
def test_every_byte_of_a_batch_is_covered_by_a_checksum(extras: bool) -> None:
    if extras:  # headers and create times: a third length column and blob
        pb = pack(_with_extras([E1 + 1, E1 + 2, E1 + 3])[0], wave=3, copyset=(4,))
    else:
        pb = pack(records([E1 + 1, E1 + 2, E1 + 5], keyed=True), wave=3, copyset=(4,))
    assert (pb.extras() is not None) == extras
    for at in range(len(pb.data)):
        bad = bytearray(pb.data)
        bad[at] ^= 0x10
        try:
            got = PackedBatch.parse(bytes(bad))
        except ProtocolError:
            continue
        assert not got.body_ok(), f"a flipped bit at byte {at} went unnoticed"


def test_a_decompression_bomb_is_refused_before_decompressing() -> None:
    body, raw_len, crc, codec = pack_body([None], [b"a" * 100_000], Codec.ZSTD)
    pb = PackedBatch.assemble(body, raw_len, crc, codec, 1, first_lsn=E1 + 1, timestamps_ms=1)
    data = bytearray(pb.data)
    data[36:40] = (2**31).to_bytes(4, "little")  # raw_len claimed
    with pytest.raises(ProtocolError):
        PackedBatch.parse(bytes(data))


def test_sequencer_refuses_a_body_that_fails_its_checksum() -> None:
    pb = pack(records([0, 1, 2]))
    bad = bytearray(pb.data)
    bad[-1] ^= 1
    problem = check_records(PackedBatch.parse(bytes(bad)), LogAttributes(), HostOptions())
    assert problem is not None
    assert problem[0] == Status.CHECKSUM_MISMATCH
    assert check_records(pb, LogAttributes(), HostOptions()) is None


def test_columns_and_objects_agree_across_straddling_windows() -> None:
    rb = records(list(range(E1 + 1, E1 + 101)), keyed=True)
    pb = pack(rb, codec=Codec.LZ4)
    view = BatchView(pb, E1 + 11, E1 + 90)  # a trim below, a read's end above
    runs = [RecordRun(view, 0, 30), RecordRun(view, 30, len(view))]
    cols = ColumnBatch.of(7, runs)
    assert cols.lsns == list(range(E1 + 11, E1 + 91))
    assert cols.keys == rb.columns().keys[10:90]
    assert cols.payloads == rb.columns().payloads[10:90]
    assert isinstance(cols.payload_data, np.ndarray)
    assert [p for r in runs for p in r.payloads] == rb.columns().payloads[10:90]


# -- LogsDB: stored batches and what cuts through them ---------------------------


def _db(tmp_path: Path) -> LogsDB:
    return LogsDB.open(tmp_path / "db")


def test_a_store_run_is_one_value_and_trims_cut_reads_not_batches(tmp_path: Path) -> None:
    db = _db(tmp_path)
    db.write([PutBatch.of(1, records(list(range(E1 + 1, E1 + 101))), (1, 2), 1)])
    got = db.read_packed(1)
    assert len(got.batches) == 1
    assert got.batches[0].count == 100
    db.trim(1, E1 + 40)
    # The stored batch straddles the trim point: sent whole, records read above it.
    assert len(db.read_packed(1).batches) == 1
    assert [r.lsn for r in db.read(1)] == list(range(E1 + 41, E1 + 101))
    assert db.find_time(1, 0) == E1 + 41
    db.close()


def test_a_recovery_write_splits_the_batch_it_overlaps(tmp_path: Path) -> None:
    db = _db(tmp_path)
    db.write([PutBatch.of(1, records(list(range(E1 + 1, E1 + 11))), (1, 2), 1)])
    plug = make_batch([E1 + 4, E1 + 5], [None, None], timestamps_ms=1000, flags=HOLE)
    db.write([PutBatch.of(1, plug, (2, 3), 9)])
    got = db.read_packed(1).batches
    assert [(b.first_lsn - E1, b.last_lsn - E1, b.wave) for b in got] == [
        (1, 3, 1),
        (4, 5, 9),
        (6, 10, 1),
    ]
    stored = db.read(1)
    assert [r.lsn - E1 for r in stored] == list(range(1, 11))
    assert [r.flags & HOLE for r in stored][3:5] == [HOLE, HOLE]
    assert stored[5].payload == records([E1 + 6]).columns().payloads[0]
    db.close()


def test_compaction_rewrites_batches_keeping_the_other_lsns(tmp_path: Path) -> None:
    db = _db(tmp_path)
    rb = records(list(range(E1 + 1, E1 + 21)), keyed=True)
    db.write([PutBatch.of(1, rb, (1,), 1)])
    assert db.delete(1, [E1 + 2, E1 + 3, E1 + 20, E1 + 99]) == 3
    left = db.read(1)
    assert [r.lsn - E1 for r in left] == [1, *range(4, 20)]
    payloads = rb.columns().payloads
    assert [r.payload for r in left] == [payloads[0], *payloads[3:19]]
    (batch,) = db.read_packed(1).batches
    assert batch.count == 17
    assert batch.body_ok()
    db.close()


def test_servable_windows_cut_a_batch_where_recovery_ended_its_epoch() -> None:
    from logstrand.epochstore import EpochEnd

    pb = pack(records(list(range(E1 + 1, E1 + 11))), wave=1)
    end = EpochEnd(lng_esn=6, bridge_esn=7, seal=2)
    out = servable_windows([(pb, E1 + 1, E1 + 10)], (3 << 32) | 1, lambda e: end)
    assert [(lo - E1, hi - E1) for _, lo, hi in out] == [(1, 6)]


def test_rebuilding_recreates_only_what_readers_are_served() -> None:
    """A donor holds the dead sequencer's own copy of records its recovery
    decided (above the LNG) and another's recovery copy: only the recovery's
    is a record of the log.  Re-creating the leftover overwrote the
    recovery's copy on the recipient in the rolling rebuilding test, and the
    batch read as DATALOSS."""
    from logstrand.epochstore import EpochEnd

    end = EpochEnd(lng_esn=6, bridge_esn=21, seal=2)
    leftover = pack(records(list(range(E1 + 1, E1 + 11))), wave=1)
    lsns = list(range(E1 + 11, E1 + 21))
    rb = make_batch(lsns, [b"r"] * 10, timestamps_ms=1000, flags=WRITTEN_BY_RECOVERY)
    by_recovery = pack(rb, wave=2)
    items = [(leftover, E1 + 1, E1 + 10), (by_recovery, E1 + 11, E1 + 20)]
    out = cut_to_windows(servable_windows(items, (3 << 32) | 1, lambda e: end))
    assert [(b.first_lsn - E1, b.last_lsn - E1, b.count) for b in out] == [(1, 6, 6), (11, 20, 10)]
    assert out[1] is by_recovery  # whole batches go as they are
    assert out[0].body_ok()
    assert out[0].wave == 1


def test_a_resumed_donor_goes_on_inside_a_batch() -> None:
    """A donor that stopped at its release pointer, inside a stored batch
    (the rest not released yet), goes on from there: the batch's later
    copies are donated.  The walk used to skip every batch that began below
    where it resumed, and with it those copies (rebuilt node short of them)."""
    a = make_batch(list(range(E1 + 1, E1 + 11)), [b"a"] * 10, timestamps_ms=1000)
    b = make_batch(list(range(E1 + 11, E1 + 21)), [b"b"] * 10, timestamps_ms=1000)
    # First pass: released to E1+15, inside b.
    first = donation_windows([a, b], E1 + 1, E1 + 15)
    assert [(lo - E1, hi - E1) for _, lo, hi in first] == [(1, 10), (11, 15)]
    # Resumed at E1+16: b's copies 16..20 are still to do; a is done.
    later = donation_windows([a, b], E1 + 16, E1 + 20)
    assert [(x is b, lo - E1, hi - E1) for x, lo, hi in later] == [(True, 16, 20)]
    [cut] = cut_to_windows(later)
    assert cut.lsns() == list(range(E1 + 16, E1 + 21))


def test_an_old_format_directory_is_refused_at_open(tmp_path: Path) -> None:
    db = _db(tmp_path)
    batch = db._engine.new_batch()
    batch.put("meta", b"V", (1).to_bytes(8, "big"))
    db._engine.write(batch, sync=True)
    db.close()
    with pytest.raises(InvalidArgumentError, match="format 1"):
        _db(tmp_path)


def test_a_corrupt_stored_batch_is_never_data(tmp_path: Path) -> None:
    db = _db(tmp_path)
    db.write([PutBatch.of(1, records([E1 + 1, E1 + 2]), (1,), 1)], sync=True)
    cf = f"p{db.partitions()[-1].id:010d}"
    key = (1).to_bytes(8, "big") + (E1 + 1).to_bytes(8, "big")
    value = bytearray(db._engine.get(cf, key) or b"")
    value[-3] ^= 0x40
    batch = db._engine.new_batch()
    batch.put(cf, key, bytes(value))
    db._engine.write(batch, sync=True)
    with pytest.raises(CorruptionError, match="checksum"):
        db.read_packed(1)
    db.close()


# -- extras: headers and create times ---------------------------------------------


def _with_extras(lsns: list[int]) -> tuple[PackedBatch, list[bytes | None]]:
    extras = [
        pack_extra(1_000 + i, [("h", b"%d" % i)]) if i % 3 else None for i in range(len(lsns))
    ]
    pb = make_batch(
        lsns, [b"p%d" % i for i in range(len(lsns))], timestamps_ms=7, keys=None, extras=extras
    )
    return pb, extras


@pytest.mark.parametrize("codec", list(Codec))
def test_extras_travel_with_their_records_through_every_new_header(codec: Codec) -> None:
    lsns = list(range(E1 + 1, E1 + 31))
    pb, extras = _with_extras(lsns)
    client = PackedBatch.for_append(
        [None] * 30, pb.columns().payloads, codec, (5, 1), extras=extras
    )
    assert client.extras() == extras
    stamped = client.restamp(first_lsn=E1 + 1, timestamp_ms=9, wave=2, copyset=(1, 2))
    again = PackedBatch.parse(stamped.data)
    assert again.body_ok()
    assert again.extras() == extras
    assert again.producer == (5, 1)
    moved = PackedBatch.parse(again.reheader(copyset=(3,), add_flags=0x10).data)
    assert moved.extras() == extras
    assert moved.payload_bytes == again.payload_bytes
    assert moved.select([1, 2, 4]).extras() == [extras[1], extras[2], extras[4]]
    # Records cut so that none has extras make a batch with none at all.
    assert moved.select([0, 3]).extras() is None
    assert unpack_extra(again.extras()[1]) == (1_001, (("h", b"1"),))


def test_the_sequencer_refuses_headers_over_the_record_limit() -> None:
    big = pack_extra(None, [("big", b"x" * 2_000)])
    pb = PackedBatch.for_append([None], [b"p"], extras=[big])
    problem = check_records(pb, LogAttributes(), HostOptions(payload_bytes_max=1_000))
    assert problem is not None
    assert problem[0] == Status.TOOBIG
    assert "headers" in problem[1]


def test_malformed_extras_are_a_clear_error_and_bad_headers_are_refused() -> None:
    good = pack_extra(5, [("a", b"1"), ("b", None)])
    assert good is not None
    for cut in range(1, len(good)):
        with pytest.raises(ProtocolError):
            unpack_extra(good[:cut])
    with pytest.raises(ProtocolError):
        unpack_extra(b"\x80\x00\x00")
    for bad in ([("a",)], [(1, b"x")], [("a", "text")]):
        with pytest.raises(InvalidArgumentError):
            pack_extra(None, bad)  # type: ignore[arg-type]


def test_logsdb_keeps_extras_through_splits_compaction_and_digests(tmp_path: Path) -> None:
    db = _db(tmp_path)
    lsns = list(range(E1 + 1, E1 + 11))
    pb, extras = _with_extras(lsns)
    db.write([PutBatch.of(1, pb, (1, 2), 1)])
    plug = make_batch([E1 + 4, E1 + 5], [None, None], timestamps_ms=1000, flags=HOLE)
    db.write([PutBatch.of(1, plug, (2, 3), 9)])
    assert db.delete(1, [E1 + 2]) == 1
    got = {r.lsn: r.extra for r in db.read(1)}
    want = {lsn: x for lsn, x in zip(lsns, extras, strict=True)}
    assert got == {lsn: None if lsn in (E1 + 4, E1 + 5) else want[lsn] for lsn in got}
    assert E1 + 2 not in got
    # What a digest carries (the records as one packed batch) keeps them too.
    digest = db.read_batch(1, E1 + 1, E1 + 10).to_packed()
    assert dict(zip(digest.lsns(), digest.extras() or [], strict=True)) == got
    db.close()


@given(
    st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(-3, 300), min_size=1, max_size=64),
    st.integers(0, 7),
    st.booleans(),
)
def test_a_body_s_lengths_are_checked_as_one_by_one(
    lens: list[int], start: int, honest_size: bool
) -> None:
    """``_lengths`` checks with passes in C (the top bit of each word, a
    count of -1s): it refuses exactly what comparing each length refuses,
    a length below -1 or lengths that disagree with the body's size."""
    import struct

    from logstrand.batch._layout import check_lengths as _lengths
    from logstrand.errors import ProtocolError

    data = bytes(start) + struct.pack(f"<{len(lens)}i", *lens)
    size = sum(lens) + lens.count(-1) if honest_size else sum(map(abs, lens)) + 1
    sound = min(lens) >= -1 and sum(lens) + lens.count(-1) == size
    if sound:
        assert _lengths(data, start, len(lens), size) == lens
        assert _lengths(memoryview(data), start, len(lens), size) == lens
    else:
        with pytest.raises(ProtocolError):
            _lengths(data, start, len(lens), size)

"""The Kafka front's record encoding in C (``_fastrecords``) writes the
same bytes as the Python one (``encode_columns``) for every stored batch,
and hands the shapes it does not take to it (``_packed_records``)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import Codec, make_batch, pack_extra
from logstrand.client._views import BatchView, RecordRun
from logstrand.kafka import _packed_records
from logstrand.kafka._records import decode_batches
from logstrand.kafka._records_encode import encode_columns
from logstrand.types import compose_lsn

needs_c = pytest.mark.skipif(
    not _packed_records.compiled(), reason="built without a C compiler, or LOGSTRAND_PURE_PYTHON"
)

_bytes = st.one_of(st.none(), st.binary(max_size=300))
#: A record's extras: none, a create time (what a Kafka producer stores),
#: headers (which the C helper hands back), or bytes of no known shape.
_extra = st.one_of(
    st.none(),
    st.integers(0, 2**63 - 1).map(pack_extra),
    st.builds(lambda t: pack_extra(t, [("h", b"v")]), st.integers(0, 2**40)),
    st.just(b"\x00\x00"),
)


def _python(run: RecordRun, offsets: list[int], lo: int, hi: int, codec: int) -> bytes:
    extras = run.extras
    return encode_columns(
        offsets[lo:hi],
        run.timestamps_ms[lo:hi],
        run.keys[lo:hi],
        run.payloads[lo:hi],
        None if extras is None else extras[lo:hi],
        7,
        codec,
    )


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.tuples(_bytes, _bytes, _extra), min_size=1, max_size=40),
    with_extras=st.booleans(),
    compressed=st.booleans(),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40)),
    stamps=st.lists(st.integers(0, 2**41), min_size=40, max_size=40),
)
def test_c_and_python_write_the_same_batch(
    records: list[tuple[bytes | None, bytes | None, bytes | None]],
    with_extras: bool,
    compressed: bool,
    cut: tuple[int, int, int],
    stamps: list[int],
) -> None:
    n = len(records)
    lsns = [compose_lsn(3, 10 + 2 * i) for i in range(n)]
    pb = make_batch(
        lsns,
        [p for _, p, _ in records],
        keys=[k for k, _, _ in records],
        timestamps_ms=stamps[:n],
        extras=[x for _, _, x in records] if with_extras else None,
        codec=Codec.ZSTD if compressed else Codec.NONE,
    )
    # A view cut to part of the batch, a run cut to part of the view, and
    # records lo..hi of the run: the indices the helper must map.
    a = min(cut[0], n - 1)
    view = BatchView(pb, lsns[a], lsns[-1])
    off = min(cut[1], len(view) - 1)
    run = RecordRun(view, off, len(view))
    offsets = [1000 + 2 * i for i in range(len(run))]
    lo = min(cut[2], len(run) - 1)
    for codec in (0, 1):
        want = _python(run, offsets, lo, len(run), codec)
        assert _packed_records.RunEncoder(run, offsets).batch(lo, len(run), 7, codec) == want
    decoded = decode_batches(want)[0]
    assert list(decoded.values) == run.payloads[lo:]


@needs_c
def test_records_with_headers_go_to_python() -> None:
    lsns = [compose_lsn(1, i) for i in range(1, 4)]
    extras = [pack_extra(5), pack_extra(6, [("trace", b"x")]), None]
    pb = make_batch(lsns, [b"a", b"b", b"c"], timestamps_ms=9, extras=extras)
    run = RecordRun(BatchView(pb, lsns[0], lsns[-1]), 0, 3)
    lens, starts = _packed_records._tables(pb)
    args = (pb.blob()[0], starts, lens, 3, 0, 3, [0, 1, 2], 0, [9, 9, 9], 0, True)
    _fastrecords = _packed_records._fast

    assert _fastrecords.kafka_records(*args) is None
    got = decode_batches(_packed_records.RunEncoder(run, [0, 1, 2]).batch(0, 3, 1, 0))[0]
    assert [r.headers for r in got.records] == [(), (("trace", b"x"),), ()]


@needs_c
def test_tables_that_do_not_fit_the_blob_are_an_error_not_a_read() -> None:
    _fastrecords = _packed_records._fast

    def call(starts: list[int], lens: list[int], n: int = 1) -> object:
        s, ln = struct.pack(f"<{len(starts)}q", *starts), struct.pack(f"<{len(lens)}i", *lens)
        return _fastrecords.kafka_records(b"abc", s, ln, 1, 0, n, [0], 0, [1], 0, False)

    with pytest.raises(ValueError, match="past the blob"):
        call([0, 2], [2, 5])
    with pytest.raises(ValueError, match="past the blob"):
        call([-4, 0], [1, 1])
    with pytest.raises(ValueError, match="past the blob"):
        call([2**63 - 2, 0], [5, 1])  # a start whose end overflows: not read
    with pytest.raises(ValueError, match="bad length"):
        call([0, 0], [-7, 1])
    with pytest.raises(ValueError, match="out of range"):
        call([0, 1], [1, 1], n=2)
    with pytest.raises(ValueError, match="out of range"):
        call([0], [1, 1])
    want = encode_columns([0], [1], [b"a"], [b"bc"])[61:]  # the records, past the header
    assert call([0, 1], [1, 2]) == (want, 1, 1)


def test_the_python_fallback_runs_when_asked() -> None:
    """CI runs the pure-Python path too: with LOGSTRAND_PURE_PYTHON=1 the
    helper is off and the batch still comes out."""
    code = (
        "from logstrand.kafka import _packed_records as p\n"
        "from logstrand.batch import make_batch\n"
        "from logstrand.client._views import BatchView, RecordRun\n"
        "pb = make_batch([1, 2], [b'x', None], timestamps_ms=3)\n"
        "run = RecordRun(BatchView(pb, 1, 2), 0, 2)\n"
        "print(p.compiled(), p.RunEncoder(run, [0, 1]).batch(0, 2, 1, 0).hex())\n"
    )
    env = {**os.environ, "LOGSTRAND_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    want = encode_columns([0, 1], [3, 3], [None, None], [b"x", None], None, 1, 0)
    assert out.stdout.split() == ["False", want.hex()]

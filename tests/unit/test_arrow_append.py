"""Bodies packed straight from Arrow columns are the bodies ``append_batch``
packs from the same rows, byte for byte; spans cut as ``batch_end`` cuts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import Codec, PackedBatch
from logstrand.client import ClientSettings
from logstrand.client._arrow_append import ArrowRows
from logstrand.errors import InvalidArgumentError, Status

values = st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(
    rows=values.flatmap(
        lambda ps: st.tuples(
            st.just(ps),
            st.lists(
                st.one_of(st.none(), st.binary(max_size=10)), min_size=len(ps), max_size=len(ps)
            ),
        )
    ),
    keyed=st.booleans(),
    large=st.booleans(),
    cut=st.integers(0, 5),
    codec=st.sampled_from([Codec.NONE, Codec.ZSTD]),
    number=st.one_of(st.none(), st.tuples(st.integers(1, 2**63), st.integers(0, 2**40))),
)
def test_arrow_bodies_are_the_bodies_of_the_same_rows(
    rows: tuple[list[bytes | None], list[bytes | None]],
    keyed: bool,
    large: bool,
    cut: int,
    codec: Codec,
    number: tuple[int, int] | None,
) -> None:
    payloads, keys = rows
    kind = pa.large_binary() if large else pa.binary()
    # Padding rows before ``cut`` and sliced off: the columns have an offset.
    pad: list[bytes | None] = [b"x" * 7] * cut
    cols = {"payload": pa.array(pad + payloads, kind)}
    if keyed:
        cols["key"] = pa.array(pad + keys, kind)
    data = pa.record_batch(cols).slice(cut)
    got = ArrowRows(data).batch(0, len(payloads), number, codec)
    key_list = keys if keyed else [None] * len(payloads)
    want = PackedBatch.for_append(key_list, payloads, codec, number)
    assert got.data == want.data
    assert PackedBatch.parse(got.data).keys_payloads() == (key_list, payloads)


def test_strings_chunks_and_null_slots_that_hold_bytes() -> None:
    table = pa.table({"payload": pa.chunked_array([["a", None], ["ccc"]]), "key": ["k", "l", None]})
    batch = ArrowRows(table).batch(0, 3, None, Codec.NONE)
    assert batch.keys_payloads() == ([b"k", b"l", None], [b"a", None, b"ccc"])
    # A null whose slot spans bytes (Arrow allows it): built from buffers.
    offsets = pa.py_buffer(pa.array([0, 2, 5], pa.int32()).buffers()[1])
    validity = pa.array([True, False]).buffers()[1]
    odd = pa.Array.from_buffers(pa.binary(), 2, [validity, offsets, pa.py_buffer(b"abcde")])
    assert odd.to_pylist() == [b"ab", None]
    got = ArrowRows(pa.record_batch({"payload": odd})).batch(0, 2, None, Codec.NONE)
    assert got.keys_payloads() == ([None, None], [b"ab", None])


def test_spans_cut_as_batch_end_does() -> None:
    payloads = [b"x" * n for n in (5, 5, 30, 1, 1, 1, 0, 50, 2)]
    s = ClientSettings(batch_bytes_max=10, batch_records_max=2)
    rows = ArrowRows(pa.record_batch({"payload": pa.array(payloads)}))
    want, start = [], 0
    while start < len(payloads):
        want.append((start, s.batch_end(payloads, start)))
        start = want[-1][1]
    assert rows.spans(s) == want


def test_bad_columns_are_refused_clearly() -> None:
    with pytest.raises(InvalidArgumentError, match="no column 'payload'"):
        ArrowRows(pa.record_batch({"value": [b"a"]}))
    with pytest.raises(InvalidArgumentError, match="must be binary or string, not int64"):
        ArrowRows(pa.record_batch({"payload": [1, 2]}))
    with pytest.raises(InvalidArgumentError, match="RecordBatch or Table, not list"):
        ArrowRows([b"a"])
    big = ArrowRows(pa.record_batch({"payload": [b"a", b"x" * 2000]}))
    with pytest.raises(InvalidArgumentError, match="payload of 2000 bytes") as err:
        big.check(ClientSettings(payload_bytes_max=1000))
    assert err.value.status == Status.TOOBIG

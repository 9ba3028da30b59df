"""The Spark data source's pure parts: options, the range planner, Arrow rows.
No JVM here: these run in milliseconds."""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.client import LogSegment
from logstrand.client._arrow import ARROW_SCHEMA
from logstrand.client._arrow import arrow_batch as record_batch
from logstrand.errors import InvalidArgumentError
from logstrand.spark import _plan
from logstrand.spark._arrow import rows_by_log
from logstrand.spark._options import ReadOptions, WriteOptions, parse_logs
from logstrand.types import compose_lsn

# -- options ----------------------------------------------------------------------------


def test_logs_option() -> None:
    assert parse_logs("1,5-9, 3,5") == (1, 3, 5, 6, 7, 8, 9)
    for bad in ("", "x", "9-5", "0", "1-", "1-200000"):
        with pytest.raises(InvalidArgumentError, match="logs"):
            parse_logs(bad)


def test_read_options_defaults_follow_kafka() -> None:
    batch = ReadOptions.parse({"url": "u", "logs": "1"}, streaming=False)
    assert (batch.starting, batch.ending, batch.fail_on_data_loss) == ("earliest", "latest", True)
    stream = ReadOptions.parse({"URL": "u", "Logs": "1"}, streaming=True)
    assert stream.starting == "latest"


def test_read_options_positions() -> None:
    o = ReadOptions.parse(
        {
            "url": "u",
            "logs": "1-2",
            "startingLSN": '{"1": "e2n5", "2": 7}',
            "endingLSN": '{"2": 9}',
            "minPartitions": "4",
            "failOnDataLoss": "false",
        },
        streaming=False,
    )
    assert o.starting == {1: compose_lsn(2, 5), 2: 7}
    assert o.ending == {2: 9}
    assert (o.min_partitions, o.fail_on_data_loss) == (4, False)


def test_one_log_takes_a_bare_lsn() -> None:
    o = ReadOptions.parse(
        {"url": "u", "logs": "3", "startingLSN": "e2n5", "endingLSN": "8589934600"},
        streaming=False,
    )
    assert o.starting == {3: compose_lsn(2, 5)}
    assert o.ending == {3: 8589934600}
    with pytest.raises(InvalidArgumentError, match="JSON object of log"):
        ReadOptions.parse({"url": "u", "logs": "3-4", "startingLSN": "e2n5"}, streaming=False)


@pytest.mark.parametrize(
    ("options", "streaming", "match"),
    [
        ({"logs": "1"}, False, "url"),
        ({"url": "u"}, False, "logs"),
        ({"url": "u", "logs": "1", "startingLSN": "soon"}, False, "startingLSN"),
        ({"url": "u", "logs": "1", "startingLSN": '{"3": 1}'}, False, "not among"),
        ({"url": "u", "logs": "1", "startingLSN": '{"1": -4}'}, False, "not an LSN"),
        ({"url": "u", "logs": "1", "startingLSN": "latest"}, False, "read nothing"),
        ({"url": "u", "logs": "1", "endingLSN": "latest"}, True, "batch"),
        ({"url": "u", "logs": "1", "minPartitions": "0"}, False, "minPartitions"),
        ({"url": "u", "logs": "1", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        ({"url": "u", "logs": "1", "maxRecordsPerTrigger": "5"}, False, "streams"),
        ({"url": "u", "logs": "1", "group": "g"}, False, "group is for streams"),
        ({"url": "u", "logs": "1", "group": "no spaces"}, True, "bad group name"),
        (
            {"url": "u", "logs": "1", "startingLSN": "earliest", "startingTimestamp": "5"},
            False,
            "not both",
        ),
    ],
)
def test_bad_read_options_are_clear(options: dict[str, str], streaming: bool, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        ReadOptions.parse(options, streaming=streaming)


def test_write_options() -> None:
    assert WriteOptions.parse({"url": "u", "log": "5"}).log == 5
    assert WriteOptions.parse({"url": "u"}).log is None
    with pytest.raises(InvalidArgumentError, match="log"):
        WriteOptions.parse({"url": "u", "log": "five"})
    assert WriteOptions.parse({"url": "u", "writeId": "nightly-2026-11-23"}).write_id
    with pytest.raises(InvalidArgumentError, match="writeId"):
        WriteOptions.parse({"url": "u", "writeId": " "})
    assert ReadOptions.parse({"url": "u", "logs": "1", "group": "g"}, streaming=True).group == "g"


# -- planning ---------------------------------------------------------------------------


def seg(first: int, last: int, records: int, t0: int = 0, t1: int = 0, node: int = 0) -> LogSegment:
    return LogSegment(node, first, last, t0, t1, records * 100, records)


def no_extents(log: int, lo: int, hi: int) -> dict[int, int]:
    raise AssertionError("one epoch: no epoch extents needed")


def test_one_epoch_is_cut_in_equal_lsn_steps_from_where_records_start() -> None:
    lo, hi = compose_lsn(3, 1), compose_lsn(3, 1001)
    ranges = _plan.plan(
        {1: (lo, hi)},
        {1: [seg(lo, hi - 1, 1000, node=n) for n in (0, 1)]},
        {1: 2},
        min_partitions=4,
        max_records=10**6,
        extents=no_extents,
    )
    assert [(r.lo - lo, r.hi - lo) for r in ranges] == [
        (0, 250),
        (250, 500),
        (500, 750),
        (750, 1000),
    ]


def test_across_epochs_cuts_by_record_position() -> None:
    # From LSN 1: epoch 1 holds ESNs 1..600, epoch 2 nothing known, epoch 3 ESNs 1..200 so far.
    e1, e3 = compose_lsn(1, 1), compose_lsn(3, 1)
    asked = []

    def extents(log: int, lo: int, hi: int) -> dict[int, int]:
        asked.append((log, lo, hi))
        return {1: 601}

    ranges = _plan.plan(
        {1: (1, e3 + 200)},
        {1: [seg(e1, e3 + 199, 800)]},
        {1: 1},
        min_partitions=4,
        max_records=10**6,
        extents=extents,
    )
    assert asked == [(1, 1, e3 + 200)]
    assert [(r.lo, r.hi) for r in ranges] == [
        (1, e1 + 200),
        (e1 + 200, e1 + 400),
        (e1 + 400, e3),
        (e3, e3 + 200),
    ]


def test_partitions_are_shared_by_size_and_capped() -> None:
    counts = _plan.share({1: 900.0, 2: 100.0, 3: 0.0}, min_partitions=10, max_records=10**6)
    assert counts[1] > counts[2] >= 1
    assert counts[3] == 1
    assert _plan.share({1: 5e6}, min_partitions=1, max_records=10**6) == {1: 5}


@given(
    start=st.integers(1, 1 << 40),
    length=st.integers(0, 1 << 36),
    parts=st.integers(1, 50),
    extents=st.dictionaries(st.integers(0, 300), st.integers(0, 1 << 33), max_size=20),
)
def test_a_plan_covers_the_range_exactly(
    start: int, length: int, parts: int, extents: dict[int, int]
) -> None:
    """Whatever the epoch extents say, the ranges tile [start, end)."""
    end = start + length
    ranges = _plan.cut(1, start, end, parts, extents)
    if end <= start:
        assert ranges == []
        return
    assert ranges[0].lo == start
    assert ranges[-1].hi == end
    assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges))
    assert all(r.hi > r.lo for r in ranges)
    assert len(ranges) <= parts


# -- arrow ------------------------------------------------------------------------------


def test_arrow_rows_match_the_spark_schema() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from logstrand.spark import LOG_SCHEMA

    assert to_arrow_schema(LOG_SCHEMA, timezone="UTC") == ARROW_SCHEMA
    lsn = compose_lsn(7, 3)
    b = record_batch(4, [lsn], [1_700_000_000_123], [b"k"], [None])
    row = b.to_pylist()[0]
    assert (row["log_id"], row["lsn"], row["epoch"], row["esn"]) == (4, lsn, 7, 3)
    assert row["timestamp"].timestamp() == 1_700_000_000.123
    assert (row["key"], row["payload"]) == (b"k", None)
    with pytest.raises(InvalidArgumentError, match="2\\^63"):
        record_batch(4, [1 << 63], [0], [None], [b""])


def test_rows_by_log_by_option_and_by_column() -> None:
    b = pa.RecordBatch.from_pydict(
        {"log_id": [1, 2, 1], "payload": ["a", "b", "c"], "key": [b"x", None, b"z"]}
    )

    def rows(by: dict[int, Any]) -> dict[int, tuple[list[Any], list[Any]]]:
        return {
            log: (
                r.span(0, len(r)).column("payload").to_pylist(),
                r.span(0, len(r))["key"].to_pylist(),
            )
            for log, r in by.items()
        }

    assert rows(rows_by_log(b, None)) == {1: (["a", "c"], [b"x", b"z"]), 2: (["b"], [None])}
    assert rows(rows_by_log(b, 9)) == {9: (["a", "b", "c"], [b"x", None, b"z"])}
    one = pa.RecordBatch.from_pydict({"log_id": [3, 3], "payload": [b"a", b"b"]})
    assert list(rows_by_log(one, None)) == [3]
    with pytest.raises(InvalidArgumentError, match="payload"):
        rows_by_log(pa.RecordBatch.from_pydict({"log_id": [1]}), None)
    with pytest.raises(InvalidArgumentError, match="log_id"):
        rows_by_log(pa.RecordBatch.from_pydict({"payload": [b"a"]}), None)
    with pytest.raises(InvalidArgumentError, match="binary or string"):
        rows_by_log(pa.RecordBatch.from_pydict({"payload": [1]}), 1)


def test_partitions_pickle() -> None:
    from logstrand.spark import LsnRange

    r = LsnRange("sqlite:///x", 3, 10, 20, True)
    assert pickle.loads(pickle.dumps(r)) == r


def test_a_stream_reader_pickles_without_its_driver_client() -> None:
    from logstrand.spark import LogstrandStreamReader

    reader = LogstrandStreamReader(ReadOptions.parse({"url": "u", "logs": "1"}, streaming=True))
    reader._client = object()  # stands for a live client
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._client is None
    assert copy.opts == reader.opts

"""The console's pure parts: paging logs over ranges, showing bytes,
counters from a metrics page."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.console._records import show_bytes
from logstrand.console._scrape import parse_counters
from logstrand.console._views import list_logs
from logstrand.epochstore import LogRange
from logstrand.errors import InvalidArgumentError


@st.composite
def ranges(draw: st.DrawFn) -> list[LogRange]:
    out, at = [], 1
    for i in range(draw(st.integers(0, 6))):
        at += draw(st.integers(0, 50))
        size = draw(st.integers(1, 40))
        out.append(LogRange(at, at + size - 1, name=draw(st.sampled_from([None, f"r{i}", "x"]))))
        at += size
    return out


@settings(max_examples=200, deadline=None)
@given(rs=ranges(), limit=st.integers(1, 30), q=st.sampled_from(["", "x", "r1", "5..60", "7"]))
def test_pages_cover_every_matching_log_once_in_order(
    rs: list[LogRange], limit: int, q: str
) -> None:
    def wanted(r: LogRange, log: int) -> bool:
        if not q:
            return True
        if q == "5..60":
            return 5 <= log <= 60
        if q == "7":
            return log == 7
        return r.name is not None and q in r.name

    want = [log for r in rs for log in range(r.first, r.last + 1) if wanted(r, log)]
    got: list[int] = []
    offset = 0
    while True:
        page = list_logs(list(reversed(rs)), q, offset, limit)
        assert page["total"] == len(want)
        got += [x["log_id"] for x in page["logs"]]
        assert len(page["logs"]) <= limit
        offset += limit
        if offset >= page["total"]:
            break
    assert got == want


def test_a_page_deep_in_a_huge_range_costs_no_walk() -> None:
    page = list_logs([LogRange(1, 10**12)], "", 10**12 - 3, 10)
    assert [x["log_id"] for x in page["logs"]] == [10**12 - 2, 10**12 - 1, 10**12]
    with pytest.raises(InvalidArgumentError):
        list_logs([], "", 0, 1001)


def test_bytes_are_shown_as_json_text_or_hex_and_cut() -> None:
    assert show_bytes(None) is None
    assert show_bytes(b'{"a": [1]}') == {
        "size": 10, "truncated": False, "text": '{"a": [1]}', "json": {"a": [1]}
    }  # fmt: skip
    assert show_bytes(b"{not json") == {"size": 9, "truncated": False, "text": "{not json"}
    assert show_bytes(b"\xff\x00") == {"size": 2, "truncated": False, "hex": "ff00"}
    big = show_bytes(b"y" * 10_000)
    assert big is not None
    assert (big["size"], big["truncated"], len(big["text"])) == (10_000, True, 4096)


def test_counters_are_summed_over_their_labels() -> None:
    page = b"""# HELP logstrand_read_records_total x
logstrand_read_records_total{node="1"} 5.0
logstrand_read_records_total{node="1",x="y"} 2.0
logstrand_append_records_total{node="1"} 7
logstrand_other_total 99
"""
    assert parse_counters(page) == {
        "append_records": 7.0, "append_bytes": 0.0, "read_records": 7.0, "store_records": 0.0
    }  # fmt: skip

"""The pure part of consumer groups: keys, values, the position table, lag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.epochstore import EpochEnd
from logstrand.errors import InvalidArgumentError
from logstrand.positions import (
    GROUP_RE,
    METADATA_MAX,
    POSITIONS_LOG_ID,
    POSITIONS_LOGS,
    Position,
    PositionTable,
    check_group,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    epochs_to_walk,
    group_of_key,
    lag_of,
    last_lsn_of,
    membership_key,
    positions_log_of,
    records_between,
    reset_target,
    txn_positions_key,
    txn_state_key,
)
from logstrand.records import LOG_ID_MAX, check_log_id
from logstrand.types import LSN_MAX, compose_lsn

groups = st.from_regex(GROUP_RE, fullmatch=True)
logs = st.integers(1, LOG_ID_MAX)


@given(groups, logs)
def test_keys_round_trip(group: str, log: int) -> None:
    # Log ids hold zero bytes (1 is seven of them and a one): the split
    # must not look for the separator inside them.
    assert decode_key(encode_key(group, log)) == (group, log)


@given(st.binary(max_size=40))
def test_any_key_decodes_or_is_refused(key: bytes) -> None:
    decoded = decode_key(key)
    if decoded is not None:
        assert encode_key(*decoded) == key


@given(st.integers(0, LSN_MAX), st.integers(0, 2**63))
def test_values_round_trip(lsn: int, ms: int) -> None:
    assert decode_value(encode_value(lsn, ms)) == (lsn, ms, None, None)


@given(st.integers(0, LSN_MAX), st.integers(0, 2**62), st.integers(-1, 2**62), st.text(max_size=50))
def test_kafka_commits_keep_their_offset_and_metadata(
    lsn: int, ms: int, offset: int, metadata: str
) -> None:
    assert decode_value(encode_value(lsn, ms, offset, metadata)) == (lsn, ms, offset, metadata)


def test_a_membership_record_is_kept_apart_from_positions() -> None:
    table = PositionTable()
    table.apply(5, membership_key("g"), b"{}")
    table.apply(6, encode_key("g", 7), encode_value(9, 1, 10, "m"))
    assert table.memberships == {"g": b"{}"}
    assert table.of_group("g") == [Position("g", 7, 9, 1, 10, "m")]
    table.apply(7, membership_key("g"), None)
    assert table.memberships == {}
    with pytest.raises(InvalidArgumentError, match="metadata"):
        encode_value(1, 1, 1, "x" * (METADATA_MAX + 1))


@given(st.text(min_size=1, max_size=40), st.integers(0, 2**62))
def test_transactions_records_are_kept_apart_from_groups(name: str, pid: int) -> None:
    """A transactional id's state and a transaction's held positions never
    read as a group's position or membership, whatever the id."""
    table = PositionTable()
    group = "g"
    table.apply(1, txn_state_key(name), b"state")
    table.apply(2, txn_positions_key(group, pid), b"held")
    for key in (txn_state_key(name), txn_positions_key(group, pid)):
        assert decode_key(key) is None
        assert group_of_key(key) is None
    assert table.positions == {}
    assert table.memberships == {}
    assert table.txns == {name: b"state"}
    assert table.txn_positions == {(group, pid): b"held"}
    table.apply(3, txn_positions_key(group, pid), None)
    table.apply(4, txn_state_key(name), None)
    assert table.txns == {}
    assert table.txn_positions == {}


@pytest.mark.parametrize("bad", ["", "-a", "a b", "x" * 129, "é", None, 5])
def test_bad_group_names_are_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="bad group name"):
        check_group(bad)


def test_bad_values_and_logs_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        encode_value(-1, 0)
    with pytest.raises(InvalidArgumentError):
        encode_key("g", 0)
    assert decode_value(b"\x03" + bytes(24)) is None  # a later version
    assert decode_value(b"short") is None


def test_the_positions_logs_are_the_internal_logs_a_client_may_name() -> None:
    assert check_log_id(POSITIONS_LOG_ID) == POSITIONS_LOG_ID
    assert check_log_id(POSITIONS_LOGS[-1]) == POSITIONS_LOGS[-1]
    with pytest.raises(InvalidArgumentError):
        check_log_id(POSITIONS_LOGS[-1] + 1)


def test_groups_spread_over_the_positions_logs_by_name() -> None:
    homes = {positions_log_of(f"group-{i}") for i in range(200)}
    assert homes == set(POSITIONS_LOGS)
    assert positions_log_of("billing") == positions_log_of("billing")


def test_the_table_keeps_the_latest_record_of_each_key_and_tombstones_remove() -> None:
    t = PositionTable()
    t.apply(1, encode_key("a", 1), encode_value(10, 100))
    t.apply(2, encode_key("a", 2), encode_value(20, 200))
    t.apply(3, encode_key("b", 1), encode_value(5, 300))
    t.apply(4, encode_key("a", 1), encode_value(11, 400))
    t.apply(5, b"not a position", b"x")
    t.apply(6, encode_key("b", 1), None)
    a1 = t.get("a", 1)
    assert a1 is not None
    assert (a1.lsn, a1.committed_ms) == (11, 400)
    assert t.get("b", 1) is None
    assert list(t.groups()) == ["a"]
    assert [p.log_id for p in t.of_group("a")] == [1, 2]
    assert t.read_through == 6
    t.advance(9)
    assert t.read_through == 9


def test_records_between_counts_esns_within_an_epoch_and_across_ended_ones() -> None:
    e = compose_lsn
    assert records_between(e(3, 5), e(3, 12), {}) == 7
    assert records_between(e(3, 12), e(3, 5), {}) == 0
    # Epoch 3 ended with its bridge at ESN 21 (records 1..20), epoch 4 held
    # nothing, epoch 5 has 7 records so far.
    ends = {3: EpochEnd(lng_esn=20, bridge_esn=21, seal=5), 4: None}
    assert records_between(e(3, 5), e(5, 7), ends) == (20 - 5) + 7
    assert records_between(0, e(5, 7), ends) == 20 + 7
    assert list(epochs_to_walk(e(3, 5), e(5, 7))) == [3, 4]
    assert len(epochs_to_walk(0, e(5000, 1))) == 1000


def test_lag_and_resets() -> None:
    e = compose_lsn
    lag = lag_of(None, e(1, 4), {}, 1_000, 3_500, group="g", log_id=7)
    assert (lag.committed, lag.lag_records, lag.lag_ms) == (None, 4, 2_500)
    assert lag.to_json()["group"] == "g"
    assert reset_target("earliest") == 0
    assert reset_target("latest", tail=e(2, 9)) == e(2, 9)
    assert reset_target("lsn", lsn=e(2, 3)) == e(2, 2)
    assert reset_target("time", found=e(2, 1)) == e(2, 0)
    with pytest.raises(InvalidArgumentError):
        reset_target("lsn", lsn=0)


def test_last_lsn_of_a_batch() -> None:
    from logstrand.client import GapItem
    from logstrand.types import GapType

    assert last_lsn_of([]) is None
    assert last_lsn_of([GapItem(GapType.HOLE, 3, 9)]) == 9

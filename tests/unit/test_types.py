from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import logstrand
from logstrand import Gap, GapType, LogstrandError, Status
from logstrand.errors import CorruptionError, InvalidArgumentError, ProtocolError
from logstrand.types import (
    TAIL,
    compose_lsn,
    format_lsn,
    lsn_epoch,
    lsn_esn,
    parse_lsn,
    validate_log_id,
)


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_lsn_compose_splits_back(epoch: int, esn: int) -> None:
    lsn = compose_lsn(epoch, esn)
    assert lsn_epoch(lsn) == epoch
    assert lsn_esn(lsn) == esn
    assert parse_lsn(format_lsn(lsn)) == lsn
    assert parse_lsn(str(lsn)) == lsn


def test_lsn_order_follows_epoch_then_esn() -> None:
    assert compose_lsn(1, 2**32 - 1) < compose_lsn(2, 0)
    assert logstrand.LSN_OLDEST == 1
    assert logstrand.LSN_MAX == 2**64 - 1
    assert logstrand.LSN_INVALID == 0


@pytest.mark.parametrize("bad", ["", "x", "e1", "e-1n2", str(2**64), "-1", "e1n99999999999"])
def test_parse_lsn_rejects(bad: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        parse_lsn(bad)


@pytest.mark.parametrize("bad", [0, -1, 2**63, True, "1"])
def test_log_id_validation(bad: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        validate_log_id(bad)  # type: ignore[arg-type]


def test_gap_checks_its_range() -> None:
    assert Gap(GapType.BRIDGE, 5, 5).hi == 5
    with pytest.raises(ValueError, match="bad gap"):
        Gap(GapType.HOLE, 6, 5)
    with pytest.raises(ValueError, match="bad gap"):
        Gap(GapType.HOLE, 0, 5)


def test_tail_is_a_singleton_that_pickles() -> None:
    assert pickle.loads(pickle.dumps(TAIL)) is TAIL
    assert repr(TAIL) == "TAIL"


# The numbers travel on the wire: they are pinned here and never change.
PINNED_STATUS = {
    "OK": 0, "FAILED": 1, "NOTFOUND": 2, "NOSEQUENCER": 3, "TIMEDOUT": 4, "CONNFAILED": 5,
    "PEER_CLOSED": 6, "TOOBIG": 7, "OVERLOADED": 8, "INVALID_PARAM": 9, "BADMSG": 10,
    "PREEMPTED": 11, "ACCESS": 12, "CHECKSUM_MISMATCH": 13, "NOTREADY": 14, "AGAIN": 15,
    "STALE": 16, "EXISTS": 17, "NOTSUPPORTED": 18, "NOSPC": 19, "PROTONOSUPPORT": 20,
    "PARTIAL": 21, "REDIRECTED": 22, "CLOSED": 23, "NOKEY": 24, "BADPAYLOAD": 25,
    "UNAVAILABLE": 26,
    "UNKNOWN_PRODUCER": 27,
    "OUT_OF_SEQUENCE": 28,
    "DUPLICATE": 29,
    "FENCED": 30,
}  # fmt: skip
PINNED_GAPS = {
    "UNKNOWN": 0, "BRIDGE": 1, "HOLE": 2, "DATALOSS": 3, "TRIM": 4, "ACCESS": 5,
    "NOTINCONFIG": 6, "COMPACTED": 7,
}  # fmt: skip


def test_status_and_gap_numbers_are_pinned() -> None:
    assert len(Status) == len(PINNED_STATUS)
    for name, number in PINNED_STATUS.items():
        assert Status[name] == number
    for name, number in PINNED_GAPS.items():
        assert GapType[name] == number


def test_errors_carry_a_status() -> None:
    assert ProtocolError("x").status is Status.BADMSG
    assert CorruptionError("x").status is Status.CHECKSUM_MISMATCH
    err = InvalidArgumentError("too big", Status.TOOBIG)
    assert err.status is Status.TOOBIG
    assert isinstance(err, ValueError)
    assert isinstance(err, LogstrandError)
    assert "TOOBIG" in str(err)

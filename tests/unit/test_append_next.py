"""The appender's decision after each answer to an APPEND (``_append_next``):
every status, alone, without a cluster or a clock."""

from __future__ import annotations

import pytest

from logstrand.client._append_next import (
    SEQUENCE,
    CheckLog,
    Done,
    Fail,
    Follow,
    Pause,
    Settle,
    after_reply,
)
from logstrand.errors import (
    AccessDeniedError,
    DuplicateAppendError,
    FencedError,
    InvalidArgumentError,
    ProducerError,
    Status,
)
from logstrand.wire import AppendReply


def _reply(status: Status, *, redirect: int | None = None, first: int = 0) -> AppendReply:
    return AppendReply(1, int(status), first, 1, 0, redirect, message="why")


def test_no_answer_is_a_pause() -> None:
    assert after_reply(None, True) == Pause()


def test_ok_is_done_with_the_first_lsn() -> None:
    assert after_reply(_reply(Status.OK, first=0x100000007), True) == Done(0x100000007)


def test_a_redirect_is_followed_and_one_without_a_target_waits() -> None:
    assert after_reply(_reply(Status.REDIRECTED, redirect=3), True) == Follow(3)
    assert after_reply(_reply(Status.REDIRECTED), True) == Pause()


def test_an_unknown_log_is_looked_up_again() -> None:
    assert after_reply(_reply(Status.NOTFOUND), True) == CheckLog()


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (Status.TOOBIG, InvalidArgumentError),
        (Status.INVALID_PARAM, InvalidArgumentError),
        (Status.BADPAYLOAD, InvalidArgumentError),
        (Status.NOKEY, InvalidArgumentError),
        (Status.ACCESS, AccessDeniedError),
        (Status.DUPLICATE, DuplicateAppendError),
        (Status.FENCED, FencedError),
    ],
)
def test_a_refusal_no_retry_changes_fails_for_good(status: Status, error: type) -> None:
    got = after_reply(_reply(status), True)
    assert isinstance(got, Fail)
    assert type(got.error) is error
    assert got.error.status == status
    assert "why" in str(got.error)


@pytest.mark.parametrize("status", SEQUENCE)
def test_out_of_sequence_settles_until_hopeless(status: Status) -> None:
    assert after_reply(_reply(status), False) == Settle()
    got = after_reply(_reply(status), True)
    assert isinstance(got, Fail)
    assert isinstance(got.error, ProducerError)


@pytest.mark.parametrize(
    "status",
    [Status.OVERLOADED, Status.NOTREADY, Status.PREEMPTED, Status.NOSEQUENCER, Status.TIMEDOUT],
)
def test_anything_else_is_tried_again_after_a_pause(status: Status) -> None:
    assert after_reply(_reply(status), True) == Pause()


@pytest.mark.parametrize("status", [s for s in Status if s not in SEQUENCE])
def test_only_sequence_refusals_depend_on_the_producer(status: Status) -> None:
    reply = _reply(status, redirect=2)
    a, b = after_reply(reply, True), after_reply(reply, False)
    if isinstance(a, Fail):
        assert isinstance(b, Fail)
        assert (type(a.error), a.error.status) == (type(b.error), b.error.status)
    else:
        assert a == b

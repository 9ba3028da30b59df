"""What an appender does after a node's answer to an APPEND.  Pure.

``_attempts.Attempts._retry`` sends a batch, hands the answer (or its
absence) to ``after_reply`` and does what it says: the routing, the
refreshes and the waits stay in the loop, the decisions here, one status
at a time, tested alone (tests/unit/test_append_next.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..errors import (
    AccessDeniedError,
    DuplicateAppendError,
    FencedError,
    InvalidArgumentError,
    LogstrandError,
    ProducerError,
    Status,
)

if TYPE_CHECKING:
    from ..wire import AppendReply


@attrs.frozen
class Done:
    """Appended: the batch's first LSN."""

    lsn: int


@attrs.frozen
class Follow:
    """The node says the sequencer runs on ``to``: go there at once, unless
    the routing finds that this bounces between nodes (then ``Pause``)."""

    to: int


@attrs.frozen
class CheckLog:
    """The node does not know the log: read the configuration again; the
    log is gone (``NotFoundError``) or the node's view was behind (pause)."""


@attrs.frozen
class Settle:
    """Refused out of sequence while an earlier batch of the same producer
    is still out: wait for one to end, then send again at once."""


@attrs.frozen
class Fail:
    """The append fails for good with ``error``."""

    error: LogstrandError


@attrs.frozen
class Pause:
    """Refresh the view, back off, try again (while the deadline allows)."""


Next = Done | Follow | CheckLog | Settle | Fail | Pause

#: Refusals that no retry can change, and the error each becomes.
FATAL: dict[Status, type[LogstrandError]] = {
    Status.TOOBIG: InvalidArgumentError,
    Status.INVALID_PARAM: InvalidArgumentError,
    Status.BADPAYLOAD: InvalidArgumentError,
    Status.NOKEY: InvalidArgumentError,
    Status.ACCESS: AccessDeniedError,
    Status.DUPLICATE: DuplicateAppendError,
    Status.FENCED: FencedError,
}
#: Refusals of an idempotent batch that mean "not yet" while an earlier
#: batch of the same producer is still out, and "never" once it is the oldest.
SEQUENCE = (Status.OUT_OF_SEQUENCE, Status.UNKNOWN_PRODUCER)


def after_reply(reply: AppendReply | None, hopeless: bool) -> Next:
    """What to do after ``reply`` (None: no answer came, or no node could
    take the batch).  ``hopeless``: whether an out-of-sequence refusal would
    be final (not idempotent, or the batch is its producer's oldest out and
    nothing was acknowledged since it left: ``LogProducer.hopeless``)."""
    if reply is None:
        return Pause()
    status = Status(reply.status)
    if status == Status.OK:
        return Done(reply.first_lsn)
    if status == Status.REDIRECTED:
        return Follow(reply.redirect) if reply.redirect is not None else Pause()
    if status == Status.NOTFOUND:
        return CheckLog()
    if status in FATAL:
        return Fail(FATAL[status](reply.message, status))
    if status in SEQUENCE:
        return Fail(ProducerError(reply.message, status)) if hopeless else Settle()
    return Pause()  # overloaded, not ready, sealed, a node going away: again

"""The one status table and the exception hierarchy.

``Status`` numbers travel on the wire and are never reused: add new codes at
the end, never renumber.  Every exception the library raises on purpose is a
``LogstrandError`` and carries one ``Status``.

Exceptions are split by who is at fault and whether a retry can help:

* ``ProtocolError``: bytes from a peer could not be decoded (the peer's fault).
* ``InvalidArgumentError``: the caller passed something that can never work.
* ``TransientError``: the cluster could not do it now; the same call may work later.
* ``CorruptionError``: stored data failed its checksum.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """Result codes, numbered once and for all."""

    OK = 0
    #: Generic internal failure.
    FAILED = 1
    #: The log does not exist in the configuration.
    NOTFOUND = 2
    #: No sequencer could be found or activated for the log.
    NOSEQUENCER = 3
    #: A request did not complete in time.
    TIMEDOUT = 4
    #: A connection could not be made.
    CONNFAILED = 5
    #: The peer closed the connection.
    PEER_CLOSED = 6
    #: A record or message is larger than the limit.
    TOOBIG = 7
    #: A window or queue is full; retry later.
    OVERLOADED = 8
    #: An argument is invalid.
    INVALID_PARAM = 9
    #: Bytes from the network could not be decoded.
    BADMSG = 10
    #: A newer sequencer (higher epoch) has taken over the log.
    PREEMPTED = 11
    #: The requester is not allowed to do this.
    ACCESS = 12
    #: Stored data failed its checksum.
    CHECKSUM_MISMATCH = 13
    #: The target node is not running or not ready.
    NOTREADY = 14
    #: Try again: a precondition (a version, a race) did not hold this time.
    AGAIN = 15
    #: An update would move a value backwards.
    STALE = 16
    #: The object already exists.
    EXISTS = 17
    #: The operation is valid but not supported here.
    NOTSUPPORTED = 18
    #: Out of disk space.
    NOSPC = 19
    #: The protocol versions of the two ends do not overlap.
    PROTONOSUPPORT = 20
    #: Only some of the nodes did it.
    PARTIAL = 21
    #: The append was sent to a node that does not run the log's sequencer.
    REDIRECTED = 22
    #: The object was closed by this side.
    CLOSED = 23
    #: A record in a compacted log has no key.
    NOKEY = 24
    #: A payload could not be accepted (nodes before issue 57 sent it for a
    #: payload None outside a compacted log, which every log now takes).
    BADPAYLOAD = 25
    #: The epoch store (ZooKeeper or the SQLite file) cannot be reached now.
    UNAVAILABLE = 26
    #: An idempotent append from a producer the log does not know (it expired
    #: or was evicted) that does not start the producer's numbering.
    UNKNOWN_PRODUCER = 27
    #: An idempotent append whose sequence number does not follow the
    #: producer's last batch (an earlier batch has not arrived, or never will).
    OUT_OF_SEQUENCE = 28
    #: An idempotent append the log took long ago: nothing is stored again,
    #: but its LSNs are no longer known.
    DUPLICATE = 29
    #: An append of a Kafka producer that a newer producer of its
    #: transactional id replaced (a marker of a later epoch is in the log).
    FENCED = 30


class LogstrandError(Exception):
    """Base of every error logstrand raises on purpose.  Carries a ``Status``."""

    default_status: Status = Status.FAILED

    def __init__(self, message: str = "", status: Status | None = None) -> None:
        self.status: Status = status if status is not None else self.default_status
        super().__init__(message or self.status.name)

    def __str__(self) -> str:
        return f"{self.status.name}: {self.args[0]}"


class InvalidArgumentError(LogstrandError, ValueError):
    """The caller passed something that can never work (bad log id, bad LSN, too big)."""

    default_status = Status.INVALID_PARAM


class NotFoundError(LogstrandError, LookupError):
    """A log, node or other named object does not exist."""

    default_status = Status.NOTFOUND


class ProtocolError(LogstrandError):
    """Bytes from a peer were truncated, oversized or malformed.

    Raised by the wire decoder on any input it cannot decode, and by nothing else.
    """

    default_status = Status.BADMSG


class CorruptionError(LogstrandError):
    """Stored data failed its checksum; it is reported, never returned as data."""

    default_status = Status.CHECKSUM_MISMATCH


class UnreadableError(CorruptionError):
    """The storage engine cannot read a block of a column family (RocksDB's
    own block checksum failed): the keys in it are unknown."""


class TransientError(LogstrandError):
    """The cluster could not do it now (timeouts, overload, races); a retry may work."""

    default_status = Status.AGAIN


class EpochStoreUnavailableError(TransientError):
    """The epoch store cannot be reached now (ZooKeeper down, SQLite file locked).

    Calls fail with this within a bounded time and work again, with no action
    from the caller, once the store is back.
    """

    default_status = Status.UNAVAILABLE


class AccessDeniedError(LogstrandError, PermissionError):
    """The principal this client authenticated as may not do this (no grant for
    the operation on the log), or the cluster did not accept its credentials."""

    default_status = Status.ACCESS


class NotAuthenticatedError(AccessDeniedError):
    """A node did not accept the connection: no credentials where it needs
    them (a CA and a token), wrong ones, or TLS on one side only.  Unlike a
    missing grant it concerns every log, and the fix is the client's
    credentials, not the cluster's grants."""


class ExistsError(LogstrandError):
    """The object to create already exists, or overlaps one that does."""

    default_status = Status.EXISTS


class PreemptedError(LogstrandError):
    """A sequencer with a higher epoch owns the log, or the epoch was sealed."""

    default_status = Status.PREEMPTED


class StaleError(LogstrandError):
    """An update would move a monotonic value backwards."""

    default_status = Status.STALE


class ProducerError(LogstrandError):
    """An idempotent append the log cannot take as it is (UNKNOWN_PRODUCER,
    OUT_OF_SEQUENCE): the producer's numbering and the log's record of it
    disagree.  Nothing was stored twice; the client starts a new producer for
    the log, and the append may be tried again (it may then be stored twice
    if an earlier attempt was stored)."""

    default_status = Status.OUT_OF_SEQUENCE


class FencedError(ProducerError):
    """An append of a producer that a newer producer of the same
    transactional id fenced (FENCED): it never will be taken."""

    default_status = Status.FENCED


class DuplicateAppendError(LogstrandError):
    """An idempotent append the log took long ago (DUPLICATE): it was not
    stored again, and its LSNs are no longer known."""

    default_status = Status.DUPLICATE


class ClosedError(LogstrandError):
    """The object was closed by this side; using it again is a bug in the caller."""

    default_status = Status.CLOSED


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, flattened (``exc`` itself when
    it is no group)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def collapse(exc: BaseException) -> BaseException:
    """What a caller should see of ``exc``: concurrent work (a fan-out to
    several nodes) fails as an exception group; when its failures are all
    ``LogstrandError``s, or it holds one failure, that one (the first) is
    the answer.  Anything else stays as it is."""
    found = leaves(exc)
    if len(found) == 1:
        return found[0]
    ours = [e for e in found if isinstance(e, LogstrandError)]
    if ours and len(ours) == len(found):
        return ours[0]
    return exc

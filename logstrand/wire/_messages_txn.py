"""Wire messages of transactions for logstrand's own producers (protocol 8).

A producer of a transactional id (``client.transaction``) sends
``TxnRequest`` to the node that runs the sequencer of the id's positions
log, where the node's transaction coordinator holds the id (the one its
Kafka front serves too: an id means one producer whichever protocol it
speaks), as a Kafka producer sends InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn to its transaction coordinator.  The records
themselves are appends numbered under the producer's id and epoch
(``Append`` with the TRANSACTIONAL flag); the positions a transaction
commits are written by the producer into the group's positions log, held
under its producer id until the markers decide them.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from ..records import INTERNAL_LOGS
from . import _fields as f
from ._messages_groups import GROUP_NAME_MAX
from ._registry import _status, message

#: The protocol version from which a node answers these messages.
TXN_PROTOCOL = 8
#: Logs one request adds to a transaction at most.
TXN_LOGS_MAX = 4096
#: Groups one request adds at most.
TXN_GROUPS_MAX = 64
#: A transactional id's length at most (``transactions.TXN_ID_RE``).
TXN_ID_MAX = 249
#: A commit's tag's length at most (characters).
TXN_TAG_MAX = 256


class TxnOp(enum.IntEnum):
    """What a ``TxnRequest`` asks for."""

    #: The id's producer at a new epoch (every older one fenced).
    INIT = 0
    #: ``logs`` and ``groups`` join the producer's transaction (opening it).
    ADD = 1
    COMMIT = 2
    ABORT = 3
    #: An operator's abort of the id's open transaction, whoever holds it.
    FORCE_ABORT = 4


def _op_int(value: object) -> object:
    """A ``TxnOp`` as the int the wire carries; anything else as it is,
    for the validator to judge."""
    return int(value) if isinstance(value, TxnOp) else value


def _op(_inst: object, attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or value not in TxnOp._value2member_map_:
        raise ValueError(f"{attr.name}: unknown operation {value!r:.20}")


def _data_log(_inst: object, attr: attrs.Attribute[int], value: object) -> None:
    f.u64(_inst, attr, value)
    if value in INTERNAL_LOGS or value == 0:
        raise ValueError(f"{attr.name}: log {value} is not a data log")


@message(62, "any")
@attrs.frozen(slots=True)
class TxnRequest:
    """Producer (or operator) → the id's coordinator.  ``producer_id`` and
    ``producer_epoch``: the producer's (-1 for INIT by a new producer and
    for FORCE_ABORT); ``timeout_ms``: INIT's transaction timeout.

    In secure mode it needs ``write`` on the transactional id (a grant on
    it, ``security.TxnGrant``; FORCE_ABORT, an operator's, admin on every
    log), checked by the node's door (``storage._group_access``): any user
    could otherwise fence another's producer."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    op: int = attrs.field(converter=_op_int, validator=_op)
    transactional_id: str = attrs.field(validator=f.text(TXN_ID_MAX))
    producer_id: int = attrs.field(default=-1, validator=f.i64)
    producer_epoch: int = attrs.field(default=-1, validator=f.i64)
    timeout_ms: int = attrs.field(default=0, validator=f.u32)
    logs: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(_data_log, TXN_LOGS_MAX)
    )
    groups: tuple[str, ...] = attrs.field(
        default=(),
        converter=f.to_tuple,
        validator=f.tuple_of(f.text(GROUP_NAME_MAX), TXN_GROUPS_MAX),
    )
    #: COMMIT's tag: the application's name for what the transaction did
    #: (a Spark micro-batch), kept with the id's state until its next
    #: commit, so that a producer run again can tell it is done already.
    tag: str = attrs.field(default="", validator=f.text(TXN_TAG_MAX))


@message(63)
@attrs.frozen(slots=True)
class TxnReply:
    """The coordinator's answer.  ``status`` OK: taken, with ``error`` the
    coordinator's verdict (a Kafka error code: 0, PRODUCER_FENCED,
    CONCURRENT_TRANSACTIONS, ...; ``message`` says why); REDIRECTED: this
    node does not coordinate the id (ask the sequencer node of its
    positions log again); AGAIN: it is reading the id back."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    error: int = attrs.field(default=0, validator=f.u32)
    message: str = attrs.field(default="", validator=f.text(1000))
    producer_id: int = attrs.field(default=-1, validator=f.i64)
    producer_epoch: int = attrs.field(default=-1, validator=f.i64)

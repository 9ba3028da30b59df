"""The record vocabulary: what a record is, wherever it is (pure, no I/O).

One definition, imported by the wire, LogsDB, the sequencer, the nodes and the
client (a batch of records, the one format they travel and rest in, is
``logstrand.batch``):

* ``RecordFlags``: what a copy is (a hole plug, a bridge, a tombstone, written by
  recovery);
* ``precedence``: which of two differing copies of one LSN wins, for recovery
  and readers alike;
* the limits: key and payload sizes, ESN and epoch bounds, log ids.
"""

from __future__ import annotations

import enum
import re
import zlib
from typing import TYPE_CHECKING, Final

from ._units import parse_uint
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Mapping


class RecordFlags(enum.IntFlag):
    """Flags of a record copy (u16: the low byte travels with records, the
    high byte is LogsDB's own)."""

    #: A hole plug: recovery found no copy of a record that was never acknowledged.
    HOLE = 0x0001
    #: The end of an epoch (always with HOLE): the next record is in a later epoch.
    BRIDGE = 0x0002
    #: A keyed delete: the payload is None.
    TOMBSTONE = 0x0004
    #: Written by a recovery, whose seal epoch is the copy's wave.
    WRITTEN_BY_RECOVERY = 0x0008
    #: A copy re-created by rebuilding (the record's LSN and timestamp kept).
    WRITTEN_BY_REBUILDING = 0x0010
    #: Written in a transaction by its producer (the batch's producer id): a
    #: committed reader delivers it once a COMMIT marker of the producer
    #: follows, never after an ABORT (``logstrand.transactions``).
    TRANSACTIONAL = 0x0020
    #: A transaction's COMMIT or ABORT marker (the payload says which, and
    #: whose): read by readers' transaction tracking, never delivered.
    CONTROL = 0x0040


#: The flags that travel with records (the high byte is LogsDB's own).
FLAGS_PUBLIC_MASK: Final = 0x00FF

# The flags as plain ints, for loops over records: with an IntFlag operand,
# ``flags & FLAG`` goes through enum's Python-level ``__rand__``, ten times slower.
HOLE: Final = int(RecordFlags.HOLE)
BRIDGE: Final = int(RecordFlags.BRIDGE)
TOMBSTONE: Final = int(RecordFlags.TOMBSTONE)
WRITTEN_BY_RECOVERY: Final = int(RecordFlags.WRITTEN_BY_RECOVERY)
WRITTEN_BY_REBUILDING: Final = int(RecordFlags.WRITTEN_BY_REBUILDING)
TRANSACTIONAL: Final = int(RecordFlags.TRANSACTIONAL)
CONTROL: Final = int(RecordFlags.CONTROL)
#: The flags an appender gives its batch, kept by the sequencer (the rest
#: are the sequencer's, recovery's and rebuilding's to set).
FLAGS_APPENDED: Final = TRANSACTIONAL | CONTROL

#: A key is at most this long (LogsDB stores its length in a u16).
KEY_BYTES_MAX: Final = 0xFFFF
#: A node's default limit on one payload (``--payload-bytes-max``).
PAYLOAD_BYTES_MAX: Final = 1024 * 1024
#: ESNs of an epoch run 1..ESN_MAX (ESN 0 is never a record).
ESN_MAX: Final = 2**32 - 1
#: Epochs run 1..EPOCH_MAX.
EPOCH_MAX: Final = 2**32 - 1
#: User log ids run 1..LOG_ID_MAX; the top bit marks internal logs.
LOG_ID_INTERNAL_BIT: Final = 1 << 63
LOG_ID_MAX: Final = LOG_ID_INTERNAL_BIT - 1
#: The internal compacted logs of consumer positions (``logstrand.positions``):
#: a group's positions, and its membership, live in one of them by a hash of
#: its name.  The first was the only one before there were several.
POSITIONS_LOG_ID: Final = LOG_ID_INTERNAL_BIT | 1
POSITIONS_LOGS: Final = tuple(range(POSITIONS_LOG_ID, POSITIONS_LOG_ID + 16))
#: The internal logs that exist: clients read and append to them like any log.
INTERNAL_LOGS: Final = frozenset(POSITIONS_LOGS)


#: What names a consumer group (Kafka's group ids, as far as logstrand takes them).
GROUP_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}")


def positions_log_of(group: str) -> int:
    """The positions log that holds ``group``: one of ``POSITIONS_LOGS`` by a
    hash of the name (Kafka spreads groups over __consumer_offsets the same way)."""
    return POSITIONS_LOGS[zlib.crc32(group.encode()) % len(POSITIONS_LOGS)]


#: What a user may be granted on a range of logs (docs/security.md).
OPS: Final = ("read", "append", "trim", "admin")
#: What a user may be granted on a consumer group (Kafka's READ, DESCRIBE
#: and DELETE on its GROUP resource).
GROUP_OPS: Final = ("read", "describe", "delete")
#: What a user may be granted on a transactional id (Kafka's WRITE and
#: DESCRIBE on its TRANSACTIONAL_ID resource): ``write`` to run its
#: producer's transactions, ``describe`` to find its coordinator.
TXN_OPS: Final = ("write", "describe")
#: Nodes in one copyset, at most.
COPYSET_SIZE_MAX: Final = 0xFF
#: A Kafka producer's batches are numbered in a log under a key of its own
#: (``kafka_producer_key``): this bit, the Kafka producer id, a fence bit and
#: the producer epoch.  The bit keeps them apart from the ids the cluster
#: hands logstrand's own producers (small) and from Spark's derived ids
#: (the top bit).
KAFKA_PRODUCER_BIT: Final = 1 << 62
#: A key with this bit numbers a transaction's markers, not records: a
#: marker of epoch E fences the producer's records of every epoch below E.
FENCE_BIT: Final = 0x8000
_KAFKA_PID_MAX: Final = (1 << 46) - 1


def kafka_producer_key(producer_id: int, epoch: int, *, fence: bool = False) -> int:
    """The key a Kafka producer's batches (or, ``fence``, the markers of its
    transactions) are numbered under: its id and epoch together, so that a
    producer of a transactional id that starts again, at a new epoch and
    numbering from 0, is not taken for the old one retrying."""
    if not 0 <= producer_id <= _KAFKA_PID_MAX or not 0 <= epoch < FENCE_BIT:
        raise InvalidArgumentError(f"Kafka producer {producer_id} epoch {epoch} out of range")
    return KAFKA_PRODUCER_BIT | producer_id << 16 | (FENCE_BIT if fence else 0) | epoch


def kafka_producer_of(key: int) -> tuple[int, int, bool] | None:
    """(producer id, epoch, fence) of ``kafka_producer_key``'s key; None for
    any other producer's."""
    if key >> 62 != 1:
        return None
    return (key >> 16) & _KAFKA_PID_MAX, key & (FENCE_BIT - 1), bool(key & FENCE_BIT)


#: Bytes of one idempotent producer's batch entry as it travels and rests
#: (``logstrand.idempotence``): producer id, sequence number, record count,
#: first LSN, timestamp.
PRODUCER_ENTRY_BYTES: Final = 36


def precedence(flags: int, wave: int) -> tuple[int, int]:
    """Which of two differing copies of one LSN wins: the higher value.

    A copy written by a recovery beats every copy of the epoch's own sequencer,
    and a later recovery (a higher seal epoch, its wave) an earlier one.  Copies
    of the sequencer differ only by their store wave and carry the same record.
    Recovery decides with this, and readers choose between copies with it.
    """
    return (1 if flags & WRITTEN_BY_RECOVERY else 0, wave)


def log_name(log_id: int) -> str:
    """How a log is shown to people: its id, or the name of an internal log."""
    if log_id in INTERNAL_LOGS:
        n = log_id - POSITIONS_LOG_ID
        return "positions" if n == 0 else f"positions.{n}"
    return str(log_id)


def check_log_id(log_id: int, *, internal: bool = False) -> int:
    """``log_id`` if it names a log: a user's, one of ``INTERNAL_LOGS``, or
    with ``internal`` any id with the top bit set.

    Raises:
        InvalidArgumentError: not an int, zero, negative, too large, or internal.
    """
    if type(log_id) is not int:
        raise InvalidArgumentError(f"log id must be an int, got {type(log_id).__name__}")
    top = 2**64 - 1 if internal else LOG_ID_MAX
    if not 0 < log_id <= top and log_id not in INTERNAL_LOGS:
        raise InvalidArgumentError(f"log id {log_id} out of range 1..{top}")
    return log_id


def parse_log_range(
    text: str, named: Mapping[str, tuple[int, int]] | None = None
) -> tuple[int, int]:
    """A range of logs as typed: ``7``, ``1..100`` (or a name of ``named``)
    → (first, last), with 1 <= first <= last <= LOG_ID_MAX, or internal logs.

    Raises:
        InvalidArgumentError: anything else.
    """
    text = text.strip()
    if named and text in named:
        return named[text]
    first_s, sep, last_s = text.partition("..")
    try:
        first = parse_uint(first_s, "log id")
        last = parse_uint(last_s, "log id") if sep else first
    except ValueError:
        forms = ", ".join(["N", "FIRST..LAST", *(named or ())])
        raise InvalidArgumentError(f"bad log range {text!r}: use {forms} (digits 0-9)") from None
    internal = first in INTERNAL_LOGS and last in INTERNAL_LOGS and first <= last
    if not (1 <= first <= last <= LOG_ID_MAX or internal):
        raise InvalidArgumentError(f"bad log range {text!r}: need 1 <= FIRST <= LAST < 2^63")
    return first, last

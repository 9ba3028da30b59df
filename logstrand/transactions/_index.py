"""What a reader of one log knows of its transactions (pure): the markers'
format, and ``TxnIndex``, fed the log's batches in LSN order.

A transaction's records in a log are batches flagged TRANSACTIONAL, under
their producer id; a COMMIT or ABORT marker of that producer (a CONTROL
record, ``encode_marker``) ends them.  From those alone, read in LSN order,
a reader knows at each point:

* the **last stable LSN** (Kafka's last stable offset): the first LSN of the
  oldest transaction still open, or the first LSN not read yet.  A committed
  reader delivers nothing from there on: every record below it is decided.
* the **aborted transactions**: each as (producer id, first LSN, LSN of its
  ABORT marker).  A committed reader drops a producer's transactional
  records between the two (Kafka's ``aborted_transactions``, which a Kafka
  consumer filters with).

A transaction that began before the index started is seen from its first
record after the start: what came before is below every position the
index serves.  A marker with no open transaction of its producer here (the
transaction wrote nothing to this log, or the marker came twice: a
coordinator that took over writes the markers of a decided transaction
again) changes nothing.
"""

from __future__ import annotations

import bisect
import struct
from typing import Final, NamedTuple

from ..records import kafka_producer_key, kafka_producer_of

#: A marker's payload: format version, COMMIT (1) or ABORT (0) as Kafka's
#: control record types, producer id, producer epoch.
_MARKER = struct.Struct(">BBqh")
_MARKER_VERSION: Final = 0
#: Aborted transactions an index keeps at most; past it the oldest go, and
#: the index serves only from where its knowledge is whole (``kept_from``).
ABORTED_KEPT_MAX: Final = 100_000


def producer_key(producer_id: int, producer_epoch: int, *, fence: bool = False) -> int:
    """What a Kafka producer's batches are numbered under in a log: its id
    and epoch together (``records.kafka_producer_key``).  A producer of a
    transactional id that starts again keeps the id at a new epoch and
    numbers from 0 again: under the id alone its first batches would pass
    for retries of the old producer's, and be dropped as duplicates.
    ``fence``: the key its transactions' markers are numbered under, which
    fences every epoch below theirs."""
    return kafka_producer_key(producer_id, producer_epoch, fence=fence)


def producer_of(key: int) -> tuple[int, int]:
    """(producer id, epoch) of ``producer_key``'s key (another producer's
    key: itself, epoch 0)."""
    kafka = kafka_producer_of(key)
    return (key, 0) if kafka is None else (kafka[0], kafka[1])


def encode_marker(commit: bool, producer_id: int, producer_epoch: int) -> bytes:
    return _MARKER.pack(_MARKER_VERSION, 1 if commit else 0, producer_id, producer_epoch)


def decode_marker(payload: bytes | None) -> tuple[bool, int, int] | None:
    """(commit, producer id, producer epoch) of a marker, or None for
    anything else (a reader skips it: it ends no transaction)."""
    if payload is None or len(payload) != _MARKER.size:
        return None
    version, kind, pid, epoch = _MARKER.unpack(payload)
    if version != _MARKER_VERSION or kind not in (0, 1):
        return None
    return kind == 1, pid, epoch


class Aborted(NamedTuple):
    """An aborted transaction's records in one log: its producer's
    transactional records in first_lsn..marker_lsn."""

    first_lsn: int
    marker_lsn: int
    producer_id: int


class TxnIndex:
    """One log's transactions as read from ``start`` (see the module docstring)."""

    def __init__(self, start: int) -> None:
        #: The index is whole from here: a position below it is not served.
        self.kept_from = start
        #: The highest LSN read (records, gaps and markers alike).
        self.scanned = start - 1
        #: Producer id -> the first LSN of its open transaction.
        self.open: dict[int, int] = {}
        #: Ended by ABORT, in the order of their markers (LSN order).
        self.aborted: list[Aborted] = []

    def records(self, first_lsn: int, last_lsn: int, producer_id: int | None) -> None:
        """A run of records; ``producer_id`` when they are transactional."""
        if producer_id is not None:
            self.open.setdefault(producer_id, first_lsn)
        self.advance(last_lsn)

    def marker(self, lsn: int, commit: bool, producer_id: int) -> None:
        first = self.open.pop(producer_id, None)
        if first is not None and not commit:
            self.aborted.append(Aborted(first, lsn, producer_id))
            if len(self.aborted) > ABORTED_KEPT_MAX:
                gone = self.aborted.pop(0)
                self.kept_from = max(self.kept_from, gone.marker_lsn + 1)
        self.advance(lsn)

    def advance(self, lsn: int) -> None:
        """Read up to ``lsn`` (a gap, or the end of a run)."""
        self.scanned = max(self.scanned, lsn)

    def last_stable(self) -> int:
        """The first LSN a committed reader may not deliver yet."""
        return min(self.open.values(), default=self.scanned + 1)

    def aborted_between(self, lo: int, hi: int) -> list[Aborted]:
        """The aborted transactions with records that may lie in ``lo..hi``."""
        # Ordered by marker: those ending before ``lo`` are skipped by a
        # bisection, the rest checked for starting by ``hi``.
        at = bisect.bisect_left(self.aborted, lo, key=lambda a: a.marker_lsn)
        return [a for a in self.aborted[at:] if a.first_lsn <= hi]

    def forget_below(self, lsn: int) -> None:
        """No reader needs what ended below ``lsn`` (the log was trimmed)."""
        at = bisect.bisect_left(self.aborted, lsn, key=lambda a: a.marker_lsn)
        del self.aborted[:at]

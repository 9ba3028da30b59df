"""One reader's stream on a node: what to read next, what to send.  Pure: no trio.

Theory of operation
-------------------
A reader opens a stream on every node of the log's nodesets (START_READ: a
start and an until LSN, a credit of records, single-copy delivery on or off,
the nodes it knows are down).  The node pushes its copies in LSN order, up
to its release pointer, within the credit, and reports its position with
every message, also when it sends nothing, so that the reader can tell
"nothing here" from "not yet".

``ReadStreamCore`` holds a stream's position and credit and decides, given
the node's release pointer, the next step:

* ``Report(next_lsn)``: say where the stream is (an empty message);
* ``ReadFrom(start, until, max_records)``: read that many records' stored
  batches from LogsDB, then hand them to ``on_read`` with the window of each
  that may be sent;
* ``IDLE``: caught up; wait until the log's release pointer moves;
* ``NO_CREDIT``: wait for more credit;
* ``FINISHED``: everything up to ``until`` was sent.

Rules:

1. Only copies at or below the release pointer are sent, and of an epoch that
   ended before the pointer's only those its recovery's end allows
   (``servable``, decided before ``on_batch``).
2. Single-copy delivery: a copy is sent by the first node of its copyset that
   the reader does not report down; a copyset with every node down is sent by
   whoever holds it.  A stored batch has one copyset: batches another node
   sends are passed over unread (the ``not_mine`` test, given to LogsDB's
   read as ``skip``).
5. Stored batches go out as they are stored, never decoded here.  Each goes
   with a window (first, last LSN) of what the reader may take of it: the
   read's range, the trim point, and a recovery's decisions cut it where a
   batch straddles them.
3. The position reported only grows, and is reported once: an idle stream
   sends nothing (a stream per log, idle, must cost the node no work; a
   reader tells a node that is gone by its connection, and one that lags
   by its position standing still while others move: ``stall_s``).
4. Every batch carries its wave (its precedence) in its header; readers
   need it to choose between differing copies.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from ..types import LSN_MAX

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..batch import PackedBatch

READ_BATCH_RECORDS = 2048
READ_BATCH_BYTES = 4 * 1024 * 1024
#: A stream's first read takes this much at most: its reader waits for it
#: (and for every other node's first answer) before it delivers anything,
#: and a 4 MiB reply takes a few turns of the node's writer to leave.
FIRST_READ_BYTES = 256 * 1024


class Wait(enum.Enum):
    #: Caught up with the release pointer: wait for it to move.
    IDLE = "idle"
    #: The credit is spent: wait for more.
    NO_CREDIT = "no credit"
    #: Everything up to ``until`` was sent: the stream is over.
    FINISHED = "finished"


@attrs.frozen
class Report:
    """Send the position, with no records."""

    next_lsn: int


@attrs.frozen
class ReadFrom:
    start: int
    until: int
    max_records: int
    max_bytes: int = READ_BATCH_BYTES


@attrs.frozen
class Out:
    """What to send for one read: batches, a (first, last) window per batch,
    and (first, last) pairs of LSNs whose copies here cannot be read."""

    batches: tuple[PackedBatch, ...]
    windows: tuple[int, ...]
    next_lsn: int
    records: int = 0
    unreadable: tuple[int, ...] = ()


Step = Report | ReadFrom | Wait


class ReadStreamCore:
    def __init__(
        self,
        node_id: int,
        start_lsn: int,
        until_lsn: int,
        credit: int,
        *,
        scd: bool,
        known_down: Iterable[int] = (),
    ) -> None:
        self.node_id = node_id
        self.next_lsn = max(start_lsn, 1)
        self.until = until_lsn
        self.credit = credit
        self.scd = scd
        self.down = frozenset(known_down)
        self.reported = -1
        #: copyset -> True when another node of it sends its records (cached).
        self._theirs: dict[tuple[int, ...], bool] = {}

    def step(self, release_lsn: int) -> Step:
        """What to do next, the node's release pointer being ``release_lsn``."""
        limit = min(self.until, release_lsn)
        if self.next_lsn > limit:
            if self.reported != self.next_lsn:
                return Report(self.next_lsn)
            if self.next_lsn > self.until:
                return Wait.FINISHED
            return Wait.IDLE
        if self.credit <= 0:
            return Wait.NO_CREDIT
        max_bytes = FIRST_READ_BYTES if self.reported < 0 else READ_BATCH_BYTES
        return ReadFrom(self.next_lsn, limit, min(self.credit, READ_BATCH_RECORDS), max_bytes)

    def sent(self, next_lsn: int) -> None:
        """A message reporting ``next_lsn`` went out."""
        self.reported = next_lsn

    def add_credit(self, records: int) -> None:
        self.credit += records

    def not_mine(self, copyset: tuple[int, ...]) -> bool:
        """Under single-copy delivery, does another node send this copyset's records?"""
        theirs = self._theirs.get(copyset)
        if theirs is None:
            first = next((n for n in copyset if n not in self.down), None)
            # A copyset with every node down: whoever holds it sends it.
            theirs = self._theirs[copyset] = first is not None and first != self.node_id
        return theirs

    def on_read(
        self,
        items: Sequence[tuple[PackedBatch, int, int]],
        scanned_to: int,
        unreadable: Sequence[tuple[int, int]] = (),
    ) -> Out:
        """What to send of a read for ``ReadFrom``: ``items`` are the batches
        that may be served, each with its window (first, last LSN);
        ``unreadable``, (first, last) ranges whose copies fail a checksum here."""
        windows: list[int] = []
        records = 0
        for b, lo, hi in items:
            windows += (lo, hi)
            records += min(b.count, hi - lo + 1)
        self.credit -= records
        self.next_lsn = min(scanned_to + 1, LSN_MAX)
        bad = tuple(x for r in unreadable for x in r)
        return Out(tuple(b for b, _, _ in items), tuple(windows), self.next_lsn, records, bad)

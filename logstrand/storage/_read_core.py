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
* ``ReadFrom(start, until, max_records)``: read that much of LogsDB, then hand
  the batch to ``on_batch``, which picks what to send;
* ``IDLE``: caught up; wait for a release, more credit, or a heartbeat;
* ``NO_CREDIT``: wait for more credit;
* ``FINISHED``: everything up to ``until`` was sent.

Rules:

1. Only copies at or below the release pointer are sent, and of an epoch that
   ended before the pointer's only those its recovery's end allows
   (``servable``, decided before ``on_batch``).
2. Single-copy delivery: a copy is sent by the first node of its copyset that
   the reader does not report down; a copyset with every node down is sent by
   whoever holds it.  Runs another node sends are passed over unread (the
   ``not_mine`` test, given to LogsDB's read as ``skip``).
3. The position reported only grows; after a heartbeat interval with no
   change the stream reports it again (``waited``), so a reader can tell a
   node that is there from one that is gone.
4. Copies written by recovery travel with their waves (their precedence);
   readers need them to choose between differing copies.
"""

from __future__ import annotations

import bisect
import enum
from typing import TYPE_CHECKING

import attrs

from ..records import WRITTEN_BY_RECOVERY, RecordBatch
from ..types import LSN_MAX

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..logsdb._format import StoredBatch

READ_BATCH_RECORDS = 2048
READ_BATCH_BYTES = 4 * 1024 * 1024
EMPTY = RecordBatch.trusted((), (), (), (), ())


class Wait(enum.Enum):
    #: Caught up with the release pointer: wait for a release, credit or a heartbeat.
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
    """What to send for one batch read (``waves``: with recovery copies only)."""

    batch: RecordBatch
    waves: tuple[int, ...]
    next_lsn: int


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
        self._idle_limit = -1
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
            self._idle_limit = limit
            return Wait.IDLE
        if self.credit <= 0:
            return Wait.NO_CREDIT
        return ReadFrom(self.next_lsn, limit, min(self.credit, READ_BATCH_RECORDS))

    def sent(self, next_lsn: int) -> None:
        """A message reporting ``next_lsn`` went out."""
        self.reported = next_lsn

    def waited(self, release_lsn: int) -> None:
        """The stream waited while idle; when nothing moved, report again (rule 3)."""
        if self.reported == self.next_lsn and min(self.until, release_lsn) == self._idle_limit:
            self.reported = -1

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

    def on_batch(self, batch: StoredBatch, good: Sequence[int] | None) -> Out:
        """What to send of a batch read for ``ReadFrom`` (``good``: the copies
        that may be served at all, None for every one)."""
        keep = self._keep(batch, good) if self.scd else good
        if keep is None:
            out = batch.to_record_batch()
        else:
            out = RecordBatch.trusted(
                tuple(batch.lsns[i] for i in keep),
                tuple(batch.timestamps_ms[i] for i in keep),
                tuple(batch.flags[i] for i in keep),
                tuple(batch.keys[i] for i in keep),
                tuple(batch.payloads[i] for i in keep),
            )
        waves: tuple[int, ...] = ()
        if batch.flag_bits & WRITTEN_BY_RECOVERY:
            waves = tuple(batch.waves if keep is None else (batch.waves[i] for i in keep))
        self.credit -= len(out)
        self.next_lsn = min(batch.scanned_to + 1, LSN_MAX)
        return Out(out, waves, self.next_lsn)

    def _keep(self, batch: StoredBatch, good: Sequence[int] | None) -> list[int] | None:
        """Of the ``good`` copies (None: all), those this node sends (None: all)."""
        copysets = batch.copysets
        keep = [
            i
            for i in (range(len(copysets)) if good is None else good)
            if not self.not_mine(copysets[i])
        ]
        return None if len(keep) == len(copysets) else keep


def epochs_to_check(lsns: Sequence[int], release_lsn: int) -> list[int]:
    """The epochs before the release pointer's among ``lsns`` (sorted): whose
    recorded ends ``servable`` needs."""
    current = release_lsn >> 32
    if not lsns or lsns[0] >> 32 >= current:
        return []
    epochs: list[int] = []
    i = 0
    while i < len(lsns) and (e := lsns[i] >> 32) < current:
        epochs.append(e)
        i = bisect.bisect_left(lsns, (e + 1) << 32, i)
    return epochs

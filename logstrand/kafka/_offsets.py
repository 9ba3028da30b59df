"""Kafka offsets for LSNs, and back.  Pure.

Kafka offsets are dense: consumers count lag as high watermark minus
position, and tools step through a partition one offset at a time.  An LSN
is (epoch, ESN) and jumps by 2^32 at every new sequencer, so the front gives
records offsets of their own:

    offset(epoch e, ESN s) = base(e) + s - 1

``base(1) = 0``, and each later epoch starts where the one before ended:
base(e + 1) = base(e) + the ESNs of e below its bridge (the end its
recovery decided).  The recovery that finishes epoch e records base(e + 1)
in the epoch store before it marks e clean (rule 8 of
``sequencer._procedures``), so an epoch's base is known, and never changes,
from the moment the epochs before it are clean: which is also when its
records are released and a reader can see them.  An epoch with no records
gets no entry; it shares the next one's base, and no offset is lost.

Offsets are consecutive within an epoch and across a failover; the only gaps
are ESNs that recovery filled with holes (a record a dead sequencer never
got acknowledged) and records compaction removed, which Kafka consumers
already step over.
"""

from __future__ import annotations

import bisect

import attrs

from ..records import ESN_MAX
from ..types import compose_lsn, lsn_epoch, lsn_esn


@attrs.frozen
class OffsetMap:
    """One log's epoch bases, as read from the epoch store with its LCE."""

    #: ``(epoch, base)`` by epoch (``EpochStore.offset_bases``).
    bases: tuple[tuple[int, int], ...]
    #: The log's last clean epoch when the bases were read.
    clean: int

    def known(self, epoch: int) -> bool:
        """Whether offsets of ``epoch`` are final in this map."""
        return epoch <= self.clean + 1

    def base(self, epoch: int) -> int:
        i = bisect.bisect_right(self.bases, (epoch, 1 << 63)) - 1
        return self.bases[i][1] if i >= 0 else 0

    def offset(self, lsn: int) -> int:
        """The Kafka offset of the record at ``lsn`` (its epoch ``known``)."""
        return self.base(lsn_epoch(lsn)) + lsn_esn(lsn) - 1

    def lsn_at(self, offset: int) -> int:
        """The LSN a read for ``offset`` starts at: the record with that
        offset if there is one, else the first one after it."""
        bases = [b for _, b in self.bases]
        i = bisect.bisect_right(bases, offset) - 1
        epoch, base = self.bases[i] if i >= 0 else (1, 0)
        return compose_lsn(epoch, min(offset - base + 1, ESN_MAX))

    def next_offset(self, tail_lsn: int) -> int:
        """The offset the next record will have, given the log's tail LSN
        (Kafka's log end offset / high watermark)."""
        if tail_lsn <= 0:
            return 0
        epoch = lsn_epoch(tail_lsn)
        return self.base(epoch) + lsn_esn(tail_lsn)


#: Kafka's leader epochs are int32: a logstrand epoch past it (never in
#: practice: one per sequencer activation) is shown as this.
LEADER_EPOCH_MAX = 2**31 - 1


def epoch_end(m: OffsetMap, asked: int, end: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch: (the largest epoch with records at or below
    ``asked``, the offset that epoch ends at), given the log end offset
    ``end``.  Kafka's leader epochs are logstrand's epochs, so an epoch ends
    where the next one with records starts (its base), and the newest one at
    the log's end.  An epoch newer than any with records (a sequencer that
    has appended nothing yet) also ends at the log's end: it holds nothing.
    -1, -1 for no epoch (``asked`` < 0), as Kafka answers UNDEFINED_EPOCH.

    A record acknowledged is never lost, so for an epoch a consumer read a
    record of, the end is always past that record: a Kafka client checking
    its position after a failover finds no truncation, and there is none."""
    if asked < 0:
        return -1, -1
    later = [(e, b) for e, b in m.bases if e > asked]
    if not later:
        return asked, end
    below = [e for e, _ in m.bases if e <= asked]
    if below:
        return below[-1], later[0][1]
    # Epoch 1 starts at offset 0 without an entry: it holds the records
    # below the first entry's base, if there are any.
    return (1 if later[0][1] > 0 else asked), later[0][1]

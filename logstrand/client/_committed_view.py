"""What a committed reader of one log delivers (``read(...,
isolation="committed")``), fed the items a plain reader would deliver.
Pure.

A committed reader delivers a record once no transaction below it is open
(its LSN is below the log's **last stable LSN**, ``TxnIndex``), and never
a record of an aborted transaction.  Reading in LSN order, it learns both
from the log itself: a transaction's records are flagged TRANSACTIONAL,
and its COMMIT or ABORT marker follows them.  So the view **holds** what
it reads from the first record of an open transaction on, and releases it,
without the aborted records, when the marker comes.

Holding is bounded (``hold_max_bytes``).  Past it the view **spills**: it
drops what it holds, keeps reading only to learn where transactions end
(the index alone), and asks for the spilled range again once it is decided
(``reread``): the shell reads it with a second stream, bounded by the last
stable LSN, and feeds it through ``decided``.  Memory stays bounded however
long a transaction stays open, at the cost of reading that range twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import CONTROL, TRANSACTIONAL
from ..transactions import TxnIndex, decode_marker, producer_of

if TYPE_CHECKING:
    from ._views import RecordRun

#: What a view holds at most before it spills (payload bytes).
HOLD_MAX_BYTES = 8 * 1024 * 1024


def _first(item: Any) -> int:
    return int(item.lsns[0]) if hasattr(item, "lsns") else int(item.lo)


def _last(item: Any) -> int:
    return int(item.last_lsn) if hasattr(item, "lsns") else int(item.hi)


def _size(item: Any) -> int:
    view = getattr(item, "view", None)
    return 64 if view is None else 64 + int(view.payload_bytes)


class CommittedView:
    """One log's committed view (see the module docstring)."""

    def __init__(self, start: int, hold_max_bytes: int = HOLD_MAX_BYTES) -> None:
        self.index = TxnIndex(start)
        self.hold_max_bytes = hold_max_bytes
        self._held: list[Any] = []
        self._held_bytes = 0
        #: Spilled: the first LSN dropped, to be read again once decided.
        self.spilled_from: int | None = None

    def feed(self, items: list[Any]) -> list[Any]:
        """Items read in LSN order; what may be delivered now."""
        for item in items:
            if hasattr(item, "lsns"):
                feed_index(self.index, item)
            else:
                self.index.advance(item.hi)
            if self.spilled_from is None:
                self._held.append(item)
                self._held_bytes += _size(item)
        out = self._release()
        if self._held_bytes > self.hold_max_bytes and self._held:
            self.spilled_from = _first(self._held[0])
            self._held, self._held_bytes = [], 0
        return out

    def _release(self) -> list[Any]:
        stable = self.index.last_stable()
        at = 0
        while at < len(self._held) and _first(self._held[at]) < stable:
            at += 1
        if not at:
            return []
        out, self._held = self._held[:at], self._held[at:]
        self._held_bytes -= sum(_size(i) for i in out)
        out = self.decided(out)
        # What ended below everything still to deliver is never needed
        # again (an aborted transaction's records all precede its marker):
        # the index keeps only the aborted transactions that may matter.
        low = stable if self.spilled_from is None else min(stable, self.spilled_from)
        if self._held:
            low = min(low, _first(self._held[0]))
        self.index.forget_below(low)
        return out

    def reread(self) -> tuple[int, int] | None:
        """The spilled range that is decided now, (first, last) LSN, which
        the shell reads again and feeds to ``decided``; None: nothing yet.
        The view is whole again once the index has no open transaction."""
        if self.spilled_from is None:
            return None
        stable = self.index.last_stable()
        if stable <= self.spilled_from:
            return None
        span = (self.spilled_from, stable - 1)
        # Everything read is decided: what comes next is held again.
        self.spilled_from = None if stable > self.index.scanned else stable
        return span

    def decided(self, items: list[Any]) -> list[Any]:
        """``items`` (below the last stable LSN) without aborted records."""
        if not self.index.aborted:
            return items
        if not items:
            return items
        aborted = self.index.aborted_between(_first(items[0]), max(_last(i) for i in items))
        if not aborted:
            return items
        return [i for i in items if not _aborted(i, aborted)]

    def at_end(self) -> None:
        """The stream ended: what is held of open transactions is never
        delivered (a committed reader stops at the last stable LSN)."""
        self._held, self._held_bytes = [], 0


def _aborted(item: Any, aborted: list[Any]) -> bool:
    if not hasattr(item, "lsns") or not item.txn_flags & TRANSACTIONAL:
        return False
    producer = item.view.packed.producer
    if producer is None:
        return False
    pid = producer_of(producer[0])[0]
    first = int(item.lsns[0])
    return any(a.producer_id == pid and a.first_lsn <= first <= a.marker_lsn for a in aborted)


def feed_index(index: TxnIndex, run: RecordRun) -> None:
    """What one run tells the index: a marker ends its producer's
    transaction; a transactional run opens (or goes on with) its own."""
    lsns = run.lsns
    kind = run.txn_flags
    if kind & CONTROL:
        for lsn, payload in zip(lsns, run.payloads, strict=True):
            marker = decode_marker(payload)
            if marker is not None:
                index.marker(lsn, marker[0], marker[1])
        index.advance(lsns[-1])
        return
    producer: Any = run.view.packed.producer
    pid = producer_of(producer[0])[0] if kind & TRANSACTIONAL and producer is not None else None
    index.records(lsns[0], lsns[-1], pid)

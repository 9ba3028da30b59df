"""A committed reader (``read(..., isolation="committed")``): a read
stream whose items pass through the log's ``CommittedView``, which holds
back what open transactions may still abort and drops what they did.  When
the view spills (a transaction open past its bound), the decided range is
read again here with a second stream, bounded by the last stable LSN.

Where it ends: reading to ``TAIL``, at the log's last stable LSN (what is
behind a transaction still open is not delivered, as a Kafka read_committed
consumer stops at the LSO).  Reading to an LSN, once every transaction with
records up to it is decided: the stream reads on past it for their markers
(a transaction is decided within its timeout, when its coordinator aborts
it), and delivers the committed records up to it.  So ranges that share a
log's LSNs between them (Spark's partitions, a stream's micro-batches) each
get all of their committed records, and nothing twice."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import attrs

from ..types import LSN_MAX
from ._committed_view import HOLD_MAX_BYTES, CommittedView
from ._reader import ReadStream
from ._reader_parts import GapItem
from ._views import RecordRun

if TYPE_CHECKING:
    from ._admin import LogPlacement
    from ._reader_core import ReaderCore
    from ._reader_parts import Item


@attrs.define(eq=False)
class CommittedStream(ReadStream):
    """A ``ReadStream`` that delivers committed records only."""

    #: What the view holds at most before it spills (``CommittedView``).
    hold_max_bytes: int = attrs.field(default=HOLD_MAX_BYTES, kw_only=True)
    view: CommittedView | None = attrs.field(init=False, default=None)
    #: The second stream reading a spilled range again, while it lasts.
    _again: ReadStream | None = attrs.field(init=False, default=None)
    _ended: bool = attrs.field(init=False, default=False)
    #: An ``until`` LSN: the last one delivered (the core reads on past it).
    _limit: int | None = attrs.field(init=False, default=None)

    def begin(self, placement: LogPlacement, until: int) -> ReaderCore:
        if isinstance(self.until_arg, int):
            self._limit, until = until, LSN_MAX
        return super().begin(placement, until)

    async def _deliverable(self) -> list[Item]:
        while True:
            if self._again is not None:
                items = await self._again._deliverable()
                if not items:
                    await self._again.aclose()
                    self._again = None
                    continue
                assert self.view is not None
                out = self.view.decided(items)
            elif self._ended:
                return []
            else:
                raw = await self._next_core_items()
                # The start is known once the stream opened (a group's
                # position may set it): the view starts there.
                view = self.view = self.view or CommittedView(self.start, self.hold_max_bytes)
                if raw:
                    out = view.feed(raw)
                else:
                    self._ended = True
                    view.at_end()
                    out = []
                self._again_over(view.reread())
                limit = self._limit
                if limit is not None and self._again is None and view.index.last_stable() > limit:
                    # Every transaction with records up to the limit is decided,
                    # and what the view held up to it is out.
                    self._ended = True
            if self._limit is not None:
                out = _clip(out, self._limit)
            if out:
                return out

    def _again_over(self, span: tuple[int, int] | None) -> None:
        """Read ``span`` (spilled, decided now) again before going on."""
        if span is not None:
            self._again = ReadStream(
                self.admin,
                self.links,
                self.log_id,
                span[0],
                span[1],
                single_copy=self.single_copy,
                access_gaps=self.access_gaps,
            )

    async def aclose(self) -> None:
        if self._again is not None:
            await self._again.aclose()
            self._again = None
        await super().aclose()


def _clip(items: list[Item], limit: int) -> list[Item]:
    """``items`` up to LSN ``limit``: runs and gaps across it cut there."""
    if not items or _last(items[-1]) <= limit:
        return items
    out: list[Item] = []
    for item in items:
        if isinstance(item, GapItem):
            if item.lo <= limit:
                out.append(attrs.evolve(item, hi=min(item.hi, limit)))
            continue
        lsns = item.lsns
        keep = bisect.bisect_right(lsns, limit)
        if keep == len(lsns):
            out.append(item)
        elif keep:
            out.append(RecordRun(item.view, item.off, item.off + keep))
    return out


def _last(item: Item) -> int:
    return item.hi if isinstance(item, GapItem) else item.last_lsn

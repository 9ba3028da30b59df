"""A committed reader (``read(..., isolation="committed")``): a read
stream whose items pass through the log's ``CommittedView``, which holds
back what open transactions may still abort and drops what they did.  When
the view spills (a transaction open past its bound), the decided range is
read again here with a second stream, bounded by the last stable LSN."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..positions import last_lsn_of
from ._committed_view import CommittedView
from ._reader import ReadStream

if TYPE_CHECKING:
    from ._reader_parts import Item


@attrs.define(eq=False)
class CommittedStream(ReadStream):
    """A ``ReadStream`` that delivers committed records only."""

    view: CommittedView | None = attrs.field(init=False, default=None)
    #: The second stream reading a spilled range again, while it lasts.
    _again: ReadStream | None = attrs.field(init=False, default=None)
    _ended: bool = attrs.field(init=False, default=False)

    async def _next_items(self) -> list[Item]:
        items = await self._committed_items()
        if self.cursor is not None:
            self.cursor.delivered(last_lsn_of(items))
        return items

    async def _committed_items(self) -> list[Item]:
        while True:
            again = self._again
            if again is not None:
                items = await again._next_core_items()
                if items:
                    assert self.view is not None
                    out = self.view.decided(items)
                    if out:
                        return out
                    continue
                await again.aclose()
                self._again = None
            if self._ended:
                return []
            raw = await self._next_core_items()
            if self.view is None:
                # The start is known only once the stream opened (a group's
                # position): the view starts there.
                self.view = CommittedView(self.start)
            if not raw:
                self._ended = True
                self.view.at_end()
                span = self.view.reread()
            else:
                out = self.view.feed(raw)
                span = self.view.reread()
                if out and span is None:
                    return out
                if out:
                    self._reread(span)
                    return out
            if span is not None:
                self._reread(span)

    def _reread(self, span: tuple[int, int] | None) -> None:
        if span is None:
            return
        first, last = span
        self._again = ReadStream(
            self.admin,
            self.links,
            self.log_id,
            first,
            last,
            single_copy=self.single_copy,
            access_gaps=self.access_gaps,
        )

    async def aclose(self) -> None:
        if self._again is not None:
            await self._again.aclose()
            self._again = None
        await super().aclose()

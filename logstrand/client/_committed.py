"""A committed reader (``read(..., isolation="committed")``): a read
stream whose items pass through the log's ``CommittedView``, which holds
back what open transactions may still abort and drops what they did.  When
the view spills (a transaction open past its bound), the decided range is
read again here with a second stream, bounded by the last stable LSN."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._committed_view import HOLD_MAX_BYTES, CommittedView
from ._reader import ReadStream

if TYPE_CHECKING:
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

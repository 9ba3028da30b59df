"""A reader's link to its consumer group (``client.read(..., group=)``):
where to start, and commits of what it handed out as it goes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from ..errors import LogstrandError
from ..types import LSN_MAX, LSN_OLDEST

if TYPE_CHECKING:
    from ._model import Position

_log = logging.getLogger("logstrand.client")


class Positions(Protocol):
    """What a cursor needs of its client's groups (``_client.Groups``)."""

    async def committed(self, group: str, log_id: int) -> Position | None: ...

    async def commit(self, group: str, log_id: int, lsn: int) -> int: ...


@attrs.define(eq=False)
class GroupCursor:
    """A reader's link to its group: where to start, and commits as it goes.

    The reader says what each batch it hands out ends at (``delivered``);
    when it is asked for the next batch, the one before counts as processed
    (as Kafka's consumer commits, on the next poll, what the last one
    returned).  With ``autocommit`` it commits the processed LSN at most
    every ``interval_s``, and once more when it is closed.
    """

    groups: Positions
    group: str
    log_id: int
    autocommit: bool = attrs.field(kw_only=True)
    interval_s: float = attrs.field(kw_only=True)
    committed: int | None = attrs.field(init=False, default=None)
    _delivered: int | None = attrs.field(init=False, default=None)
    _processed: int | None = attrs.field(init=False, default=None)
    _last_commit: float = attrs.field(init=False, default=float("-inf"))

    async def start(self) -> int:
        # The first commit comes an interval after the start, as every later one.
        self._last_commit = trio.current_time()
        position = await self.groups.committed(self.group, self.log_id)
        if position is None:
            return LSN_OLDEST
        self.committed = position.lsn
        return min(position.lsn + 1, LSN_MAX)

    def delivered(self, lsn: int | None) -> None:
        if lsn is not None:
            self._delivered = lsn

    async def next_requested(self) -> None:
        """The reader was asked for more: what it handed out before is processed."""
        self._processed = self._delivered
        if self.autocommit and trio.current_time() - self._last_commit >= self.interval_s:
            await self._commit()

    async def close(self) -> None:
        if self.autocommit:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 5.0):
                await self._commit()

    async def _commit(self) -> None:
        lsn = self._processed
        if lsn is None or lsn == self.committed:
            return
        self._last_commit = trio.current_time()
        try:
            await self.groups.commit(self.group, self.log_id, lsn)
        except LogstrandError as exc:
            # At least once: the next commit (or the next reader) covers it.
            _log.warning("group %s log %d: commit failed: %s", self.group, self.log_id, exc)
            return
        self.committed = lsn

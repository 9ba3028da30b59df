"""A node's part of compaction: dropping its superseded copies (DROP_COPIES)
and taking a pass's clean point (CLEAN_POINT).

The cleaner (``logstrand.compaction._cleaner``, on the log's sequencer node)
decides what goes with an offset map and sends it to every node of the log;
each node scans its own copies up to the pass's end, removes those the map
says a newer record of their key supersedes (or tombstones past their
horizon), syncs, gives the space back, and says how far it got.  Only
released records are ever cleaned, and only compacted logs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from ..compaction import OffsetMap
from ..compaction._shell import Throttle, compacted_attributes
from ..errors import LogstrandError, Status
from ..wire import CleanPoint, DropCopies, DropReply
from ._reads import ReadPort

if TYPE_CHECKING:
    from collections.abc import Generator

    from ..net import Connection
    from ..rpc import ClusterView
    from ._metrics import NodeMetrics

_log = logging.getLogger("logstrand.cleaner")

#: How full a node fills the map it rebuilds from a ``DropCopies``: half
#: empty, it is probed twice as fast as at the cleaner's 0.9 (memory is what
#: one part's entries take, twice: 25 MB for the largest part).
MAP_LOAD = 0.5


class DropPort(ReadPort, Protocol):
    """What dropping copies needs of the node's LogsDB (the committer)."""

    def drop_copies(
        self, msg: DropCopies, offsets: OffsetMap | None = None
    ) -> Generator[int, None, DropReply]: ...
    def set_clean_point(self, log_id: int, lsn: int) -> None: ...
    async def reclaim(self, log_id: int) -> None: ...


@attrs.define(eq=False)
class Drops:
    node_id: int
    db: DropPort
    view: ClusterView
    metrics: NodeMetrics

    async def handle_drop(self, conn: Connection, msg: DropCopies) -> None:
        try:
            reply = await self.drop(msg)
        except (LogstrandError, ValueError) as exc:  # e.g. not compacted, a malformed map
            _log.warning("node %d: drop for log %d refused: %s", self.node_id, msg.log_id, exc)
            status = exc.status if isinstance(exc, LogstrandError) else Status.INVALID_PARAM
            reply = DropReply(msg.request_id, int(status), self.node_id)
        except Exception:
            _log.exception("node %d: drop for log %d failed", self.node_id, msg.log_id)
            reply = DropReply(msg.request_id, int(Status.FAILED), self.node_id)
        await conn.reply(reply)

    async def drop(self, msg: DropCopies) -> DropReply:
        """Remove this node's superseded copies at or below ``msg.end_lsn``
        (the rule: ``NodeStore.drop_copies``), throttled to the pass's rate."""
        await compacted_attributes(self.view, msg.log_id)  # refuses a log that is not compacted
        # The map of a part (half a million keys) takes a second or more to
        # build: in a thread, where the loop keeps running beside it (built
        # here, every node stopped for 3-4 s at each part of a 5-million-key
        # pass, long enough for the others to think it dead).
        offsets = await trio.to_thread.run_sync(
            functools.partial(OffsetMap.from_entries, msg.offsets, load_factor=MAP_LOAD)
        )
        throttle = Throttle(msg.rate_bytes_s)
        steps = self.db.drop_copies(msg, offsets)
        while True:
            try:
                nbytes = next(steps)
            except StopIteration as stop:
                reply: DropReply = stop.value
                break
            await throttle.spent(nbytes)
        await self.db.reclaim(msg.log_id)
        return reply

    def on_clean_point(self, msg: CleanPoint) -> None:
        with contextlib.suppress(LogstrandError):
            self.db.set_clean_point(msg.log_id, msg.lsn)

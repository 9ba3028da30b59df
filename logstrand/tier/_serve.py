"""A node's answers to ``TierRead``: a reader's records below a log's tiered
point, read from the object that holds them (docs/tiered-storage.md).

The node looks the log's segments up in the epoch store (kept for
``STATE_TTL_S``), opens the object that holds the LSN asked for (its footer
and index, kept for each object it opened lately) and reads the blocks from
that LSN in one ranged read, ``max_bytes`` of them at most (the rest of
them is the read-ahead).  Blocks are kept in a cache of ``cache_bytes``
(``--tier-cache``), least recently used out first, so that readers of the
same records, and the next read of one reader, cost no second GET.

What cannot be read is said, never skipped: an object that is not in the
store is a DATALOSS gap over its segment, a block or index that fails its
checksum a CHECKSUM_FAIL gap over what it covers (each logged with the
object's key), and a store that does not answer is AGAIN (the reader asks
another node, then again).  The grant is checked before the handler runs,
as for every read (``wire.ACCESS``: ``TierRead`` needs "read").

The rules are ``_answers.TierAnswers``, a procedure (``_steps``); this is
its shell: it runs the object store's calls in worker threads and the
read-ahead in the extension's nursery.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from ..errors import Status
from ..wire import TierReadReply
from ._answers import LSN_FIRST, STATE_TTL_S, Ahead, BlockCache, TierAnswers
from ._format import CorruptObject
from ._io import perform_io
from ._objects import ObjectStoreError
from ._steps import AwaitAhead, Command, ObjectCall, Procedure, StoreCall, drive

if TYPE_CHECKING:
    from ..net import Connection
    from ..rpc import ClusterView
    from ..wire import TierRead
    from ._objects import ObjectStore

_log = logging.getLogger("logstrand.tier")
#: Read-aheads running at once on a node.
AHEAD_MAX = 8

__all__ = ["AHEAD_MAX", "LSN_FIRST", "STATE_TTL_S", "BlockCache", "TierServer"]


class TierServer:
    """The node's ``TierRead`` handler (see the module docstring)."""

    def __init__(self, store: ObjectStore, view: ClusterView, cache_bytes: int) -> None:
        self.store = store
        self.view = view
        self.core = TierAnswers(cache_bytes)
        self.cache = self.core.cache
        #: Where read-ahead runs (the extension's nursery; None: no read-ahead).
        self.nursery: trio.Nursery | None = None
        #: The read-aheads running, by their first block: a reader that needs
        #: that block waits for it rather than asking the store again.
        self._ahead_now: dict[tuple[str, int], trio.Event] = {}

    async def handle(self, conn: Connection, msg: TierRead) -> None:
        try:
            reply = await self.answer(msg)
        except ObjectStoreError as exc:
            _log.warning("tier: log %d: the object store: %s", msg.log_id, exc)
            reply = TierReadReply(msg.request_id, int(Status.AGAIN), message=str(exc)[:1000])
        await conn.send(reply)

    async def answer(self, msg: TierRead) -> TierReadReply:
        reply, ahead = await self._drive(self.core.answer(msg, time.monotonic()))
        if ahead is not None and self.nursery is not None:
            self.nursery.start_soon(self._ahead, ahead)
        return reply  # type: ignore[no-any-return]

    async def _drive(self, proc: Procedure) -> Any:
        """Run one of the core's procedures to its end."""
        return await drive(proc, self._perform, (ObjectStoreError, CorruptObject))

    async def _perform(self, cmd: Command) -> Any:
        match cmd:
            case StoreCall() | ObjectCall():
                return await perform_io(cmd, self.view, self.store)
            case AwaitAhead():
                running = self._ahead_now.get(cmd.key)
                if running is not None:
                    await running.wait()
                return None
        raise AssertionError(f"no such command here: {cmd!r}")

    async def _ahead(self, ahead: Ahead) -> None:
        """Read-ahead: the blocks after an answer, fetched while the reader
        takes it in, so that its next ask finds them in the cache.  One at a
        time per object and ``AHEAD_MAX`` in all; a failure is left to the
        reader's own read to meet and report."""
        key = (ahead.opened.name, ahead.at)
        if key in self._ahead_now or len(self._ahead_now) >= AHEAD_MAX:
            return
        if self.cache.peek(key):
            return
        done = self._ahead_now[key] = trio.Event()
        try:
            await self._drive(self.core.fetch(ahead.opened, ahead.at, ahead.limit))
        except (ObjectStoreError, CorruptObject):
            pass
        finally:
            del self._ahead_now[key]
            done.set()

"""Read streams kept from one fetch to the next.

A consumer catching up fetches a partition again and again, each fetch at
the offset after the last one's records.  Opening a read stream for every
fetch (the nodes start a stream, fill its window, are told to stop) cost
more than the records: 100 records of 10 KiB per fetch went at a few
thousand a second.  So the stream a fetch read from is kept, with the items
it had read but not returned, under (log, the offset the next fetch will
ask for); a fetch at that offset goes on with it.

Bounds: at most ``SESSIONS_MAX`` streams are kept (each holds what its
nodes sent ahead, up to its window), the least recently used closed first,
and one not used for ``IDLE_S`` is closed at the next look.  A stream is
kept only while it has not reached the end it was opened for (the tail when
it was opened): a reader at the tail opens a new one, with the new tail.
"""

from __future__ import annotations

import collections
import contextlib
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import LogstrandError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..client import ReadStream

SESSIONS_MAX = 32
IDLE_S = 10.0


@attrs.define(eq=False)
class Session:
    stream: ReadStream
    batches: AsyncIterator[list[Any]]
    #: It follows the log past its tail (a long poll's): it has no end, and
    #: a fetch takes what it holds without waiting for more.  Its stream is
    #: read by a task of its own into ``_ready`` (``follow``), so a long poll
    #: that times out leaves it whole for the next one.
    follows: bool = False
    #: Items read from the stream and not returned yet.
    leftover: list[Any] = attrs.field(factory=list)
    used: float = 0.0
    #: The next fetch's answer, being read ahead (``_fetch_read.Ahead``).
    ahead: Any = None
    #: The Kafka codec its batches are sent with (the topic's compression.type).
    codec: int = 0
    #: The scope of its task (``follow``'s, or the read ahead's): closing
    #: the session cancels it.
    scope: trio.CancelScope | None = None
    _ready: trio.MemoryReceiveChannel[list[Any] | None] | None = None

    def follow(self, nursery: trio.Nursery) -> None:
        """Read the stream in a task of ``nursery`` (one batch ahead)."""
        send, self._ready = trio.open_memory_channel[list[Any] | None](1)
        scope = self.scope = trio.CancelScope()

        async def pump() -> None:
            with scope, contextlib.suppress(LogstrandError, trio.BrokenResourceError):
                async for items in self.batches:
                    await send.send(items)
                await send.send(None)

        nursery.start_soon(pump)

    def nothing_ready(self) -> bool:
        """Its task has read nothing that a fetch has not taken."""
        return self._ready is not None and self._ready.statistics().current_buffer_used == 0

    async def next_items(self) -> list[Any] | None:
        """The next items: the leftover first; None at the stream's end.
        Cancelled while it waits, a following session loses nothing."""
        if self.leftover:
            items, self.leftover = self.leftover, []
            return items
        if self._ready is not None:
            try:
                return await self._ready.receive()
            except trio.EndOfChannel:
                return None
        try:
            return await self.batches.__anext__()
        except StopAsyncIteration:
            return None


class Sessions:
    """The kept streams of one front (see the module docstring)."""

    def __init__(self) -> None:
        self._kept: collections.OrderedDict[tuple[int, int], Session] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def waiting(self, log_id: int, offset: int) -> bool:
        """A stream follows ``log_id`` from ``offset`` and holds nothing yet."""
        s = self._kept.get((log_id, offset))
        return s is not None and s.follows and not s.leftover and s.nothing_ready()

    def take(self, log_id: int, offset: int) -> Session | None:
        """The stream kept for a fetch of ``log_id`` at ``offset``, if any
        (the caller owns it now: ``keep`` it again, or ``close`` it)."""
        return self._kept.pop((log_id, offset), None)

    async def keep(self, log_id: int, offset: int, session: Session) -> None:
        """Keep ``session`` for the fetch at ``offset``; close the idle and
        the least recently used beyond the bound."""
        now = trio.current_time()
        session.used = now
        old = self._kept.pop((log_id, offset), None)
        self._kept[(log_id, offset)] = session
        if old is not None:
            await close(old)
        while self._kept:
            key, oldest = next(iter(self._kept.items()))
            if len(self._kept) <= SESSIONS_MAX and oldest.used + IDLE_S > now:
                break
            del self._kept[key]
            await close(oldest)

    async def close_all(self) -> None:
        kept, self._kept = self._kept, collections.OrderedDict()
        for session in kept.values():
            await close(session)


async def close(session: Session) -> None:
    if session.scope is not None:
        session.scope.cancel()
    with contextlib.suppress(LogstrandError, trio.BrokenResourceError, trio.ClosedResourceError):
        await session.stream.aclose()

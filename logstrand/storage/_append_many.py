"""``AppendMany``: many logs' batches in one request to their sequencer node.

Each entry is taken exactly as an ``Append`` of its own would be: checked by
the guard (permission on its log, a log the configuration has), then handed
to the sequencer host.  What differs is the answer: the entries' replies are
gathered and leave as one ``AppendManyReply`` once the last is in, as a Kafka
broker answers a ProduceRequest of many partitions once every partition has
its outcome.  An entry refused or failed gets its status there; the others
are appended all the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..errors import LogstrandError
from ..wire import Append, AppendManyReply, AppendReply

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..errors import Status
    from ..net import Connection
    from ..security import Principal
    from ..wire import AppendMany


class Checks(Protocol):
    async def check(self, principal: Principal, msg: Append) -> tuple[Status, str] | None: ...


class Appends(Protocol):
    async def handle_append(self, conn: Gather, msg: Append) -> None: ...
    def batching(self) -> AbstractContextManager[None]: ...


class Gather:
    """The replies of one ``AppendMany``'s entries (the sequencer host's
    ``ReplyAppend`` token names it in place of the connection, and the
    entry's index in place of a request id)."""

    __slots__ = ("_left", "_lsns", "_messages", "_redirects", "_stamps", "_statuses", "conn", "rid")

    def __init__(self, conn: Connection, request_id: int, n: int) -> None:
        self.conn = conn
        self.rid = request_id
        self._statuses: list[int | None] = [None] * n
        self._lsns = [0] * n
        self._stamps = [0] * n
        self._redirects = [0] * n
        self._messages = [""] * n
        self._left = n

    async def reply(self, msg: AppendReply) -> bool:
        """One entry's outcome (``msg.request_id`` is its index); the
        request's answer leaves with the last.  False: the connection is gone."""
        i = msg.request_id
        if self._statuses[i] is not None:
            return True
        self._statuses[i] = msg.status
        self._lsns[i] = msg.first_lsn
        self._stamps[i] = msg.timestamp_ms
        self._redirects[i] = msg.redirect or 0
        self._messages[i] = msg.message
        self._left -= 1
        if self._left:
            return not self.conn.closed
        return await self.conn.reply(self.answer())

    def answer(self) -> AppendManyReply:
        return AppendManyReply(
            self.rid,
            tuple(s or 0 for s in self._statuses),
            tuple(self._lsns),
            tuple(self._stamps),
            tuple(self._redirects),
            tuple(self._messages),
        )


async def handle_append_many(
    guard: Checks, appends: Appends, conn: Connection, msg: AppendMany
) -> None:
    """Take every entry (see the module docstring)."""
    gather = Gather(conn, msg.request_id, len(msg.log_ids))
    if not msg.log_ids:
        await conn.reply(gather.answer())
        return
    # One burst: the STOREs of every entry leave together, a StoreMany per node.
    with appends.batching():
        for i, (log_id, batch) in enumerate(zip(msg.log_ids, msg.batches, strict=True)):
            one = Append(i, log_id, batch)
            refused = await guard.check(conn.principal, one)
            if refused is not None:
                status, why = refused
                await gather.reply(AppendReply(i, int(status), message=why[:1024]))
                continue
            try:
                await appends.handle_append(gather, one)
            except LogstrandError as exc:
                await gather.reply(AppendReply(i, int(exc.status), message=str(exc)[:1024]))

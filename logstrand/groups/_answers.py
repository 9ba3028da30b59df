"""How a node's coordinators answer their native requests
(``GroupHeartbeat``: ``_node``; ``TxnRequest``: ``_native_txns``):
each in a task of its own, never in the connection's receive loop (an
answer may read a positions log back, or write markers), at most ``limit``
at once (past it, OVERLOADED: a client that floods requests gets no more
of the node than that).  An error the answer raises on purpose becomes its
status; any other is a bug, logged and answered FAILED: input from the
network never takes the node down."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ..errors import LogstrandError, Status

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..net import Connection

_log = logging.getLogger("logstrand.groups")


class NodeAnswers:
    """Answers requests whose replies are ``reply(request_id, status,
    message=...)`` (see the module docstring)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        reply: Callable[..., Any],
        answer: Callable[[Any, str], Awaitable[Any]],
        limit: int,
    ) -> None:
        self._nursery = nursery
        self._reply = reply
        self._answer = answer
        self.limit = limit
        self.at_once = 0

    async def take(self, conn: Connection, msg: Any) -> None:
        """The handler to register for the request type."""
        if self.at_once >= self.limit:
            await conn.reply(
                self._reply(msg.request_id, int(Status.OVERLOADED), message="too many at once")
            )
            return
        self.at_once += 1
        self._nursery.start_soon(self._one, conn, msg)

    async def _one(self, conn: Connection, msg: Any) -> None:
        try:
            try:
                reply = await self._answer(msg, getattr(conn, "peer", ""))
            except LogstrandError as exc:
                reply = self._reply(msg.request_id, int(exc.status), message=str(exc)[:1000])
            except Exception:
                _log.exception("%s: the answer failed", type(msg).__name__)
                reply = self._reply(
                    msg.request_id, int(Status.FAILED), message="the coordinator failed"
                )
            await conn.reply(reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away; what it asked for stands or times out
        finally:
            self.at_once -= 1

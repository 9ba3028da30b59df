"""A node's server: accept, handshake, and one dispatch table.

Every accepted connection gets a writer task and a receive loop that hands
each message, in order, to the handler registered for its type.  A message
with no handler has no meaning on this side of a connection and is ignored.

Rules:

1. Handlers are registered once, at start, by the parts of the node
   (``register``); the table is the whole of what a node answers.
2. One place catches a handler's failure: an expected error (a
   ``LogstrandError``) is answered with ``ErrorReply`` when the message was a
   request, and the connection goes on; anything else is a bug: it is logged
   with its traceback, answered the same way, and ends that connection only.
   No input ends the node.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import trio

from ..errors import LogstrandError, Status
from ..net import serve_connection
from ..wire import ErrorReply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..net import Connection

    Handler = Callable[[Connection, Any], Awaitable[None]]

_log = logging.getLogger("logstrand.node")


class Server:
    def __init__(
        self, node_id: int, cluster: str, *, on_closed: Callable[[Connection], None]
    ) -> None:
        self.node_id = node_id
        self.cluster = cluster
        self.on_closed = on_closed
        self._handlers: dict[type, Handler] = {}

    def register(self, message_type: type, handler: Handler) -> None:
        assert message_type not in self._handlers, f"{message_type.__name__} handled twice"
        self._handlers[message_type] = handler

    async def serve(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    trio.serve_listeners, self._handle_stream, listeners, handler_nursery=nursery
                )
            )
            task_status.started()

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        conn = await serve_connection(
            stream, cluster=self.cluster, node_id=self.node_id, on_open=_noop
        )
        if conn is None:
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.writer)
                await conn.receive_messages(functools.partial(self._dispatch, conn))
                nursery.cancel_scope.cancel()
        finally:
            self.on_closed(conn)
            await conn.aclose()

    async def _dispatch(self, conn: Connection, msg: Any) -> None:
        handler = self._handlers.get(type(msg))
        if handler is None:
            return
        try:
            await handler(conn, msg)
        except LogstrandError as exc:
            _log.warning(
                "node %d: %s from %s: %s", self.node_id, type(msg).__name__, conn.peer, exc
            )
            await self._answer(conn, msg, exc.status, str(exc))
        except Exception as exc:
            _log.exception(
                "node %d: %s from %s failed", self.node_id, type(msg).__name__, conn.peer
            )
            await self._answer(conn, msg, Status.FAILED, f"the node failed: {exc!r}")
            await conn.aclose()

    async def _answer(self, conn: Connection, msg: Any, status: Status, text: str) -> None:
        request_id = getattr(msg, "request_id", None)
        if request_id is not None and not conn.closed:
            reply = ErrorReply(request_id, int(status), text[:4096])
            conn.send_nowait(reply)


async def _noop(conn: Connection) -> None:
    return None

"""The table of what a node answers: one handler per message type, each a
part's method (the rules are in the parts), registered with the server."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from .. import _trace
from ..errors import LogstrandError, Status
from ..wire import (
    MANY_PROTOCOL,
    Amend,
    Append,
    AppendMany,
    CleanPoint,
    DropCopies,
    FindTime,
    GetDigest,
    GetLogDirectory,
    GetNodeStatus,
    GetSeqState,
    GetTails,
    LogInfo,
    Ping,
    Pong,
    ReadCredit,
    Release,
    Renew,
    Seal,
    StartRead,
    StopRead,
    Store,
    Trim,
    TrimLog,
)
from ._append_many import handle_append_many
from ._trims import Trims

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import trio

    from ..net import Connection
    from ..rpc import ClusterView
    from ..wire import LogInfoReply, NodeStatus, TailsReply
    from ._drops import Drops
    from ._group_commit import Committer
    from ._guard import Guard
    from ._metrics import NodeMetrics
    from ._options import NodeOptions
    from ._peers import Peers
    from ._reads import ReadStreams
    from ._sequencers import SequencerHost
    from ._server import Server

_log = logging.getLogger("logstrand.node")


class HandlerHost(Protocol):
    """The node, as its handlers see it."""

    node_id: int
    options: NodeOptions
    metrics: NodeMetrics
    view: ClusterView
    peers: Peers
    guard: Guard
    server: Server
    sequencers: SequencerHost

    def log_info(self, msg: LogInfo) -> LogInfoReply: ...
    def tails(self, msg: GetTails) -> TailsReply: ...
    def status(self, msg: GetNodeStatus) -> NodeStatus: ...


class _Background:
    """Runs a handler as a background pass (DROP_COPIES): at most
    ``--background-passes`` at once, more refused with OVERLOADED; a pass
    that fails is logged, never taken down with the connection."""

    def __init__(self, node: HandlerHost, nursery: trio.Nursery) -> None:
        self.node_id = node.node_id
        self.passes_max = node.options.background_passes_max
        self.gauge = node.metrics.background_passes
        self.nursery = nursery
        self.running = 0

    def __call__(
        self, fn: Callable[[Connection, Any], Awaitable[None]]
    ) -> Callable[[Connection, Any], Awaitable[None]]:
        async def run(conn: Connection, msg: Any) -> None:
            try:
                await fn(conn, msg)
            except Exception:
                _log.exception("node %d: %s failed", self.node_id, type(msg).__name__)
            finally:
                self.running -= 1
                self.gauge.set(self.running)
                conn.working -= 1

        async def handle(conn: Connection, msg: Any) -> None:
            if self.running >= self.passes_max:
                raise LogstrandError(
                    f"{self.passes_max} background passes are running (--background-passes)",
                    Status.OVERLOADED,
                )
            self.running += 1
            self.gauge.set(self.running)
            conn.working += 1  # quiet while the pass runs, not idle
            self.nursery.start_soon(run, conn, msg)

        return handle


def register_handlers(
    node: HandlerHost, committer: Committer, reads: ReadStreams, drops: Drops, nursery: trio.Nursery
) -> None:
    """Register the handler of every message a node answers with its server."""
    seq = node.sequencers
    trims = Trims(node.node_id, node.view, node.peers, committer, node.guard)

    def reply(fn: Callable[[Any], Any]) -> Callable[[Connection, Any], Awaitable[None]]:
        async def handle(conn: Connection, msg: Any) -> None:
            await conn.send(fn(msg))

        return handle

    in_background = _Background(node, nursery)

    async def store(conn: Connection, msg: Store) -> None:
        if _trace.ON:
            _trace.mark("store.in")
        await committer.submit(msg, conn.offer, conn.protocol >= MANY_PROTOCOL)

    async def release(conn: Connection, msg: Release) -> None:
        committer.on_release(msg.log_id, msg.lsn)

    async def sync(fn: Callable[[Connection, Any], None], conn: Connection, msg: Any) -> None:
        fn(conn, msg)

    table: dict[type, Callable[[Connection, Any], Awaitable[None]]] = {
        Store: store,
        Append: seq.handle_append,
        AppendMany: lambda c, m: handle_append_many(node.guard, seq, c, m),
        Release: release,
        StartRead: lambda c, m: sync(reads.start, c, m),
        ReadCredit: lambda c, m: sync(reads.credit, c, m),
        StopRead: lambda c, m: sync(reads.stop, c, m),
        LogInfo: reply(node.log_info),
        GetTails: reply(node.tails),
        Seal: reply(committer.answer),
        GetDigest: reply(committer.answer),
        Amend: reply(committer.amend),
        GetSeqState: seq.handle_get_seq_state,
        Renew: seq.handle_renew,
        FindTime: reply(committer.find_time),
        Trim: reply(committer.trim),
        TrimLog: trims.handle,
        GetNodeStatus: reply(node.status),
        GetLogDirectory: reply(committer.log_directory),
        DropCopies: in_background(drops.handle_drop),
        CleanPoint: lambda c, m: sync(lambda _c, msg: drops.on_clean_point(msg), c, m),
        Ping: reply(lambda m: Pong(m.request_id)),
    }
    for message_type, handler in table.items():
        node.server.register(message_type, handler)

"""Trims asked by clients (``TrimLog``): the node records the trim point in
the epoch store, then applies it here and on every other node of the log.

A client trims through a node, never by writing the epoch store itself, so
that the node checks its permission first (the guard, op ``trim``).  Nodes
that miss the ``Trim`` (down, slow) catch up from the epoch store in their
maintenance pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..errors import Status
from ..wire import Trim, TrimLog, TrimReply

if TYPE_CHECKING:
    from ..net import Connection
    from ..rpc import ClusterView
    from ._group_commit import Committer
    from ._guard import Guard
    from ._peers import Peers

TRIM_TIMEOUT_S = 5.0


class Trims:
    def __init__(
        self, node_id: int, view: ClusterView, peers: Peers, committer: Committer, guard: Guard
    ) -> None:
        self.node_id = node_id
        self.view = view
        self.peers = peers
        self.committer = committer
        self.guard = guard

    async def handle(self, conn: Connection, msg: TrimLog) -> None:
        log_id = msg.log_id
        store = self.view.astore
        point = await store.set_trim_point(log_id, msg.lsn)
        self.guard.trimmed(log_id, point)
        epochs = await store.log_epochs(log_id)
        nodes = {n for h in epochs.history for n in h.nodeset} or set(self.view.storage_weights())
        self.committer.trim(Trim(0, log_id, point))
        others = [n for n in nodes if n != self.node_id and n in self.view.alive]
        async with trio.open_nursery() as nursery:
            for node in others:
                nursery.start_soon(
                    self.peers.request,
                    node,
                    lambda rid: Trim(rid, log_id, point),
                    TRIM_TIMEOUT_S,
                )
        await conn.send(TrimReply(msg.request_id, int(Status.OK), self.node_id, point))

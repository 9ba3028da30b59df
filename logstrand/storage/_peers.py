"""A node's outgoing side: STOREs and RELEASEs to its peers (and to itself),
requests to peers, and the STORE replies that come back.

The links to peers are ``logstrand.rpc.Links`` (one connection per peer,
made on first use, the peer suspected when it cannot be reached).  A STORE
to this node itself goes straight into the committer's queue.  Every STORE
reply, from a peer or from this node's committer, goes through one channel
to ``on_store_reply`` (the sequencer host, which routes recovery's to the
procedures): the committer never waits on sequencer work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..errors import TransientError
from ..rpc import Links
from ..wire import StoreReply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..rpc import ClusterView, Link
    from ..security import Credentials
    from ..wire import Release, Store


class LocalStore(Protocol):
    """This node's own committer, as its peers' side sees it."""

    async def submit(self, msg: Store, sink: Callable[[StoreReply], object]) -> None: ...
    def on_release(self, log_id: int, lsn: int) -> None: ...


class Peers:
    def __init__(
        self,
        node_id: int,
        view: ClusterView,
        nursery: trio.Nursery,
        local: LocalStore,
        on_store_reply: Callable[[StoreReply], Awaitable[None]],
        credentials: Credentials | None = None,
    ) -> None:
        self.node_id = node_id
        self.nursery = nursery
        self._connecting: set[int] = set()
        self.local = local
        self.on_store_reply = on_store_reply
        self.links = Links(
            view, nursery, node_id=node_id, on_message=self._unasked, credentials=credentials
        )
        # Replies to STOREs sent by this node's sequencers.  Never full: the
        # sequencers' windows bound the STOREs in flight far below this.
        self._replies_in, self._replies_out = trio.open_memory_channel[StoreReply](2**20)

    def reachable(self) -> set[int]:
        return self.links.reachable()

    async def connected(self, node_id: int) -> Link | None:
        return await self.links.connected(node_id)

    async def send_store(self, node_id: int, msg: Store) -> bool:
        """Send a STORE to a node (this one included).  False if it cannot be sent."""
        if node_id == self.node_id:
            await self.local.submit(msg, self._replies_in.send_nowait)
            return True
        link = await self.links.connected(node_id)
        if link is None:
            return False
        try:
            await link.send(msg)
        except TransientError:
            return False
        return True

    async def send_release(self, node_id: int, msg: Release) -> None:
        if node_id == self.node_id:
            self.local.on_release(msg.log_id, msg.lsn)
            return
        link = await self.links.connected(node_id)
        if link is not None:
            # Best effort: a lost RELEASE is overtaken by the next one.
            link.send_nowait(msg)

    def send_lightly(self, node_id: int, msg: Any) -> None:
        """Send ``msg`` if there is room on an open link now; else drop it, and
        open the link in the background for next time (gossip: never wait)."""
        link = self.links.open_link(node_id)
        if link is not None:
            link.send_nowait(msg)
        elif node_id not in self._connecting:
            self._connecting.add(node_id)
            self.nursery.start_soon(self._connect, node_id)

    async def _connect(self, node_id: int) -> None:
        try:
            await self.links.connected(node_id)
        finally:
            self._connecting.discard(node_id)

    async def request(self, node_id: int, make: Callable[[int], Any], timeout_s: float) -> Any:
        """A request to a peer; its reply, or None."""
        return await self.links.request(node_id, make, timeout_s)

    async def _unasked(self, link: Link, msg: Any) -> None:
        if isinstance(msg, StoreReply):
            await self._replies_in.send(msg)

    async def pump_replies(self) -> None:
        """Hand every STORE reply to ``on_store_reply``, in order, until cancelled."""
        async for reply in self._replies_out:
            await self.on_store_reply(reply)

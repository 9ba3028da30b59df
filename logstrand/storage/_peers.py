"""A node's outgoing side: STOREs and RELEASEs to its peers (and to itself),
requests to peers, and the STORE replies that come back.

The links to peers are ``logstrand.rpc.Links`` (one connection per peer,
made on first use, the peer suspected when it cannot be reached).  A STORE
to this node itself goes straight into the committer's queue.  Every STORE
reply, from a peer or from this node's committer, goes through one channel
to ``on_store_reply`` (the sequencer host, which routes recovery's to the
procedures): the committer never waits on sequencer work.

Many logs in one message (protocol 6, ``wire._messages_many``):

* the write path's STOREs (``queue_store``) wait in a box per peer and leave
  together as one ``StoreMany`` (one made outside any burst, with none
  waiting before it, leaves at once, alone): when the burst of work that made them ends
  (``batching``: an ``AppendMany`` taken whole, the STORE replies waiting
  taken whole), after ``BURST_WAIT_S`` at most, or when ``MANY_MAX`` wait.
  One lock per peer keeps them in the order they were queued, and each
  peer's boxes leave from a task of their own, so that a peer slow to read
  holds up no other's.  A box that cannot be sent is answered CONNFAILED,
  as a single STORE was;
* the replies that come back as one ``StoreReplies`` go into the channel
  together, and the pump takes every reply waiting as one burst;
* RELEASEs for one peer leave as one ``ReleaseMany`` (``send_releases``).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..errors import Status, TransientError
from ..rpc import Links
from ..wire import (
    MANY_MAX,
    MANY_PROTOCOL,
    Release,
    ReleaseMany,
    StoreMany,
    StoreReplies,
    StoreReply,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Sequence

    from ..rpc import ClusterView, Link
    from ..security import Credentials
    from ..wire import Store

#: How long queued STOREs wait at most for the burst of work that queues
#: them to end (``batching``), before they leave anyway.
BURST_WAIT_S = 0.005


class LocalStore(Protocol):
    """This node's own committer, as its peers' side sees it."""

    async def submit(
        self, msg: Store, sink: Callable[[StoreReply | StoreReplies], object]
    ) -> None: ...
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
        #: Plain STOREs waiting to leave, per peer, and the order keepers.
        self._boxes: dict[int, list[Store]] = {}
        self._box_locks: dict[int, trio.Lock] = {}
        self._flushing: set[int] = set()
        self._bursts = 0
        self._box_filled = trio.Event()
        self._bursts_over = trio.Event()

    def _local_reply(self, msg: StoreReply | StoreReplies) -> None:
        assert type(msg) is StoreReply  # this node's own STOREs: never ``many``
        self._replies_in.send_nowait(msg)

    def reachable(self) -> set[int]:
        return self.links.reachable()

    async def connected(self, node_id: int) -> Link | None:
        return await self.links.connected(node_id)

    async def send_store(self, node_id: int, msg: Store) -> bool:
        """Send a STORE to a node (this one included).  False if it cannot be sent."""
        if node_id == self.node_id:
            await self.local.submit(msg, self._local_reply)
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
        await self.send_releases(node_id, ((msg.log_id, msg.lsn),))

    # -- many logs at once ---------------------------------------------------------

    async def queue_store(self, node_id: int, msg: Store) -> None:
        """A plain STORE for a node (this one included), to leave with the
        others for that node (see the module docstring)."""
        if node_id == self.node_id:
            await self.local.submit(msg, self._local_reply)
            return
        box = self._boxes.get(node_id)
        if box is None:
            if not self._bursts and self._quiet(node_id):
                # Nothing to gather it with: straight out, as a STORE alone
                # (one task hop fewer for a lone append).
                link = self.links.open_link(node_id)
                if link is not None and link.send_nowait(msg):
                    return
            box = self._boxes[node_id] = []
        box.append(msg)
        if len(box) >= MANY_MAX:
            await self._flush(node_id)
        elif len(box) == 1:
            self._box_filled.set()

    def _quiet(self, node_id: int) -> bool:
        """No STORE for the node waits or is being sent: one sent now goes
        after every earlier one."""
        lock = self._box_locks.get(node_id)
        return node_id not in self._flushing and (lock is None or not lock.locked())

    @contextlib.contextmanager
    def batching(self) -> Iterator[None]:
        """A burst of work that queues STOREs: they wait for its end."""
        self._bursts += 1
        try:
            yield
        finally:
            self._bursts -= 1
            if not self._bursts:
                self._bursts_over.set()
                self._bursts_over = trio.Event()

    async def after_bursts(self) -> None:
        """Wait until no burst of work runs, ``BURST_WAIT_S`` at most."""
        if self._bursts:
            with trio.move_on_after(BURST_WAIT_S):
                await self._bursts_over.wait()

    async def _store_flusher(self, nursery: trio.Nursery) -> None:
        # A task per peer with a box: a peer slow to read holds up its own
        # STOREs only (``Connection.send`` waits for room), never another's.
        while True:
            await self._box_filled.wait()
            self._box_filled = trio.Event()
            await self.after_bursts()
            for node_id in list(self._boxes):
                if node_id not in self._flushing:
                    self._flushing.add(node_id)
                    nursery.start_soon(self._flush_all, node_id)

    async def _flush_all(self, node_id: int) -> None:
        try:
            while self._boxes.get(node_id):
                await self._flush(node_id)
        finally:
            self._flushing.discard(node_id)

    async def _flush(self, node_id: int) -> None:
        lock = self._box_locks.get(node_id)
        if lock is None:
            lock = self._box_locks[node_id] = trio.Lock()
        async with lock:
            box = self._boxes.pop(node_id, None)
            if not box:
                return
            sent = 0
            link = await self.links.connected(node_id)
            if link is not None:
                try:
                    if len(box) > 1 and link.conn.protocol >= MANY_PROTOCOL:
                        await link.send(StoreMany.of(box))
                        sent = len(box)
                    else:
                        for msg in box:
                            await link.send(msg)
                            sent += 1
                except TransientError:
                    pass
            for msg in box[sent:]:
                # Could not even send: answer for the node, so a new wave starts.
                failed = StoreReply(msg.store_id, msg.log_id, int(Status.CONNFAILED), node_id)
                self._replies_in.send_nowait(failed)

    async def send_releases(self, node_id: int, releases: Sequence[tuple[int, int]]) -> None:
        """RELEASEs (log, LSN) for one node, best effort: a lost RELEASE is
        overtaken by the next one."""
        if node_id == self.node_id:
            for log_id, lsn in releases:
                self.local.on_release(log_id, lsn)
            return
        link = await self.links.connected(node_id)
        if link is None:
            return
        if len(releases) > 1 and link.conn.protocol >= MANY_PROTOCOL:
            for lo in range(0, len(releases), MANY_MAX):
                part = releases[lo : lo + MANY_MAX]
                link.send_nowait(ReleaseMany(tuple(r[0] for r in part), tuple(r[1] for r in part)))
            return
        for log_id, lsn in releases:
            link.send_nowait(Release(log_id, lsn))

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
        if type(msg) is StoreReply:
            await self._replies_in.send(msg)
        elif type(msg) is StoreReplies:
            for reply in msg.replies():
                self._replies_in.send_nowait(reply)

    async def run(self) -> None:
        """Send the STOREs queued and take the replies, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._store_flusher, nursery)
            await self._pump_replies()

    async def _pump_replies(self) -> None:
        """Hand every STORE reply to ``on_store_reply``, in order: those
        waiting together as one burst."""
        async for reply in self._replies_out:
            with self.batching():
                await self.on_store_reply(reply)
                for _ in range(MANY_MAX):
                    try:
                        more = self._replies_out.receive_nowait()
                    except trio.WouldBlock:
                        break
                    await self.on_store_reply(more)

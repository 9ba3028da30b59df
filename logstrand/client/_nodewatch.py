"""A client's watch on a node that is slow to answer.

A node that stops (SIGSTOP, a hung machine) keeps its TCP connections and
its membership session for the session timeout (10 s on ZooKeeper): a
client would wait that long.  The nodes' failure detector knows sooner
(``storage._detector``), so a client whose request to a node has gone
unanswered ``suspect_after_s`` asks *another* node (``GetClusterState``)
every ``poll_s`` whether that node is dead.  When it is, the client
suspects it (routing goes around it: ``ClusterView.suspect``) and gives up
the request there, to send it again elsewhere (appends are idempotent).
While suspects remain, it asks again every ``poll_s`` and keeps suspecting
those that are still dead.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import trio

from ..errors import LogstrandError
from ..wire import ClusterState, GetClusterState

if TYPE_CHECKING:
    from ..rpc import ClusterView, Links

#: How long a node found dead stays suspected without word from a node again.
SUSPECT_S = 5.0


class _Watch:
    __slots__ = ("found", "started", "waiters")

    def __init__(self) -> None:
        self.found = trio.Event()
        self.waiters = 0
        self.started = False


class NodeWatch:
    def __init__(
        self,
        view: ClusterView,
        links: Links,
        nursery: trio.Nursery,
        *,
        suspect_after_s: float = 0.5,
        poll_s: float = 0.25,
    ) -> None:
        self.view = view
        self.links = links
        self.nursery = nursery
        self.suspect_after_s = suspect_after_s
        self.poll_s = poll_s
        self._dead: set[int] = set()
        self._renewing = False
        self._turn = itertools.count()
        #: The last answer (when, the node that gave it, whom it finds dead):
        #: requests waiting on slow nodes together ask once per ``poll_s``.
        self._last: tuple[float, int, frozenset[int]] = (-1e9, 0, frozenset())
        #: Set when the question being asked now is answered: the others wait
        #: for it instead of asking too (ten thousand slow appends ask once).
        self._asking: trio.Event | None = None
        #: Nodes being asked about, with the requests waiting on each.
        self._watches: dict[int, _Watch] = {}

    async def wait_gone(self, node: int) -> None:
        """Return once ``node`` is found gone: out of the membership, suspected,
        or dead to the nodes' failure detector.  (Runs beside a request to
        ``node`` that has waited ``suspect_after_s``, and is cancelled when
        the answer comes.)  However many requests wait on one node, one task
        asks about it."""
        if self._gone(node):
            return
        watch = self._watches.get(node)
        if watch is None:
            watch = self._watches[node] = _Watch()
            self.nursery.start_soon(self._poll, node, watch)
        watch.waiters += 1
        try:
            await watch.found.wait()
        finally:
            watch.waiters -= 1

    async def _poll(self, node: int, watch: _Watch) -> None:
        """Ask about ``node`` every ``poll_s`` while requests wait on it."""
        try:
            while watch.waiters or not watch.started:
                watch.started = True
                if self._gone(node):
                    break
                dead = await self._ask(exclude=node)
                if node in dead:
                    self._suspect(node)
                    break
                await trio.sleep(self.poll_s)
        finally:
            del self._watches[node]
            watch.found.set()

    def _gone(self, node: int) -> bool:
        return node not in self.view.up or self.view.suspected(node)

    async def _ask(self, *, exclude: int) -> frozenset[int]:
        """Who another node's failure detector finds dead (nothing when no
        other node answers in time).  One question at a time per client."""
        for _ in range(2):
            at, asked, dead = self._last
            if trio.current_time() - at < self.poll_s and asked != exclude:
                return dead
            asking = self._asking
            if asking is None:
                break
            await asking.wait()  # then its answer, unless it came from ``exclude``
        self._asking = asking = trio.Event()
        try:
            return await self._ask_one(exclude)
        finally:
            self._asking = None
            asking.set()

    async def _ask_one(self, exclude: int) -> frozenset[int]:
        others = sorted(n for n in self.view.up if n != exclude and not self.view.suspected(n))
        if not others:
            return frozenset()
        other = others[next(self._turn) % len(others)]
        try:
            reply = await self.links.request(other, GetClusterState, 1.0)
        except LogstrandError:  # (the append says what is wrong with our credentials)
            return frozenset()
        if not isinstance(reply, ClusterState) or reply.status:
            return frozenset()
        dead = frozenset(reply.dead)
        self._last = (trio.current_time(), other, dead)
        return dead

    def _suspect(self, node: int) -> None:
        self.view.suspect(node, SUSPECT_S)
        self._dead.add(node)
        if not self._renewing:
            self._renewing = True
            self.nursery.start_soon(self._renew)

    async def _renew(self) -> None:
        """Keep suspecting the nodes found dead while they are."""
        try:
            while self._dead:
                await trio.sleep(self.poll_s * 2)
                dead = await self._ask(exclude=-1)
                for node in list(self._dead):
                    if node in dead:
                        self.view.suspect(node, SUSPECT_S)
                    else:
                        self._dead.discard(node)
        finally:
            self._renewing = False

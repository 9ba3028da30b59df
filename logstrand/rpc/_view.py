"""A live, cached view of the cluster configuration, for trio code.

Nodes and clients both need the nodes, the log ranges and who is alive, on
every append.  The view keeps them in memory: membership changes arrive
through the store's watch, and the configuration is re-read every few
seconds (or at once with ``refresh()``, e.g. after NOTFOUND).

Routing sequencers (``sequencer_node``): rendezvous hashing over the live
nodes with the sequencer role that may take sequencers now.  Left out are
nodes this process suspects (it could not reach them lately), nodes the
node's failure detector finds dead (``set_health``; nodes only), and members
that say they take no sequencers (a clock off by more than the bound, a
hold-down after coming back: ``epochstore.Member``, or fresher, their
gossip).  Only when that leaves no node at all do the last come back in: a
log must always have a sequencer somewhere.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import math
import os
import time
from typing import TYPE_CHECKING

import attrs
import trio

from ..epochstore import AsyncEpochStore
from ..errors import EpochStoreUnavailableError
from ..placement import rendezvous_owner
from ..rebuilding import Authority, RebuildingState

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..epochstore import EpochStore, LogAttributes, LogRange, Members, NodeConfig, Watch

_log = logging.getLogger("logstrand.view")
#: How often a view reads the configuration again (membership comes by watch).
#: ``LOGSTRAND_VIEW_REFRESH_S`` changes it: tests make views stale with it.
REFRESH_S = float(os.environ.get("LOGSTRAND_VIEW_REFRESH_S", "2.0"))
SUSPECT_S = 2.0


#: Logs whose sequencer node ``ClusterView`` remembers at most.
OWNERS_KEPT_MAX = 200_000


@attrs.frozen(eq=False)
class _Weights:
    """``sequencer_weights`` and what it was worked out from."""

    nodes: dict[int, NodeConfig]
    members: Members
    alive: frozenset[int]
    dead: frozenset[int]
    unwilling: frozenset[int]
    suspects: int
    until: float
    weights: dict[int, float]


class ClusterView:
    def __init__(self, store: EpochStore) -> None:
        self.store = store
        self.astore = AsyncEpochStore(store)
        self.cluster = store.cluster
        self.nodes: dict[int, NodeConfig] = {}
        self.ranges: list[LogRange] = []
        #: ``range_name``'s index: the first ids of ``ranges`` (made again
        #: when ``ranges`` is a new list).
        self._by_first: list[LogRange] = []
        self._firsts: list[int] = []
        self._firsts_of: object = None
        self.alive: frozenset[int] = frozenset()
        #: The live members and what each says (its clock, whether it takes sequencers).
        self.members: Members = {}
        #: Members this node's failure detector finds dead, and those whose
        #: gossip says they take no sequencers (nodes only; ``set_health``).
        self.dead: frozenset[int] = frozenset()
        self.unwilling: frozenset[int] = frozenset()
        #: Which nodes are rebuilt, drained or being so (``logstrand.rebuilding``).
        self.rebuilding = RebuildingState()
        self.authority = Authority()
        self._watch: Watch | None = None
        self._listeners: list[Callable[[frozenset[int], frozenset[int]], None]] = []
        self._member_listeners: list[Callable[[Members], None]] = []
        self._authority_listeners: list[Callable[[Authority], None]] = []
        # Nodes this process could not connect to lately: left out of routing
        # until the entry runs out, so a dead sequencer node is routed around
        # before its membership lease lapses.  Safe to be wrong: two sequencers
        # of one log cannot both get appends acknowledged (sealing).
        self._suspects: dict[int, float] = {}
        self._suspects_changed = 0
        self._weights: _Weights | None = None
        #: Each log's sequencer node under ``_weights`` (``sequencer_node``).
        self._owners: dict[int, int | None] = {}
        self._refreshing: trio.Event | None = None
        self._queued: trio.Event | None = None

    async def refresh(self) -> None:
        """Re-read nodes, log ranges and membership now.  Callers that come
        while a refresh runs share the next one, which starts after it (so
        each sees what was true when it called): a thousand appends retrying
        at once read the store twice, not a thousand times."""
        running = self._refreshing
        if running is None:
            await self._round(trio.Event())
            return
        queued = self._queued
        if queued is not None:
            await queued.wait()
            return
        self._queued = mine = trio.Event()
        try:
            await running.wait()
        except BaseException:  # cancelled: the others waiting on it go on without
            self._queued = None
            mine.set()
            raise
        self._queued = None
        await self._round(mine)

    async def _round(self, done: trio.Event) -> None:
        self._refreshing = done
        try:
            await self._refresh()
        finally:
            self._refreshing = None
            done.set()

    async def _refresh(self) -> None:
        nodes = await self.astore.nodes()
        ranges = await self.astore.log_ranges()
        members = await self.astore.members()
        rebuilding = await self.astore.run(lambda s: s.rebuilding_state())
        self.nodes, self.ranges = nodes, ranges
        self.set_rebuilding(rebuilding)
        self._set_members(members)

    def set_rebuilding(self, state: RebuildingState) -> None:
        self.rebuilding = state
        authority = state.authority()
        if authority != self.authority:
            self.authority = authority
            for fn in self._authority_listeners:
                fn(authority)

    def on_authority(self, fn: Callable[[Authority], None]) -> None:
        """Call ``fn(authority)`` whenever the nodes' authoritative status changes."""
        self._authority_listeners.append(fn)

    def on_membership(self, fn: Callable[[frozenset[int], frozenset[int]], None]) -> None:
        """Call ``fn(old_up, new_up)`` (in trio) whenever the nodes that are up
        change: live members the failure detector does not find dead."""
        self._listeners.append(fn)

    def on_members(self, fn: Callable[[Members], None]) -> None:
        """Call ``fn(members)`` (in trio) whenever what the members say is read."""
        self._member_listeners.append(fn)

    @property
    def up(self) -> frozenset[int]:
        """Live members that the failure detector does not find dead."""
        return self.alive - self.dead

    def _set_members(self, members: Members) -> None:
        self.members = members
        for fn in self._member_listeners:
            fn(members)
        alive = frozenset(members)
        if alive == self.alive:
            return
        old_up = self.up
        old, self.alive = self.alive, alive
        for n in alive - old:
            self._suspects.pop(n, None)  # it (re)joined: no longer suspect
        self._changed(old_up)

    def set_health(self, dead: frozenset[int], unwilling: frozenset[int]) -> None:
        """What the node's failure detector says: these members are dead,
        these take no sequencers (fresher than what the membership says)."""
        self.unwilling = unwilling
        if dead == self.dead:
            return
        old_up = self.up
        self.dead = dead
        self._changed(old_up)

    def _changed(self, old_up: frozenset[int]) -> None:
        new_up = self.up
        if new_up != old_up:
            for fn in self._listeners:
                fn(old_up, new_up)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the view current until cancelled."""
        await self.refresh()
        token = trio.lowlevel.current_trio_token()

        def from_watch(members: Members) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._set_members, members)

        self._watch = await self.astore.watch_members(from_watch)
        task_status.started()
        try:
            while True:
                await trio.sleep(REFRESH_S)
                try:
                    await self.refresh()
                except EpochStoreUnavailableError as exc:
                    _log.warning("cluster view not refreshed: %s", exc)
        finally:
            if self._watch is not None:
                self._watch.cancel()

    # -- lookups ------------------------------------------------------------

    def log_attributes(self, log_id: int) -> LogAttributes | None:
        for r in self.ranges:
            if log_id in r:
                return r.attributes
        return None

    def range_name(self, log_id: int) -> str | None:
        """The name of the range ``log_id`` is in (None: no name, or in no
        range): what grants by topic name are checked against."""
        if self.ranges is not self._firsts_of:  # the view read them again
            self._by_first = sorted(self.ranges, key=lambda r: r.first)
            self._firsts = [r.first for r in self._by_first]
            self._firsts_of = self.ranges
        i = bisect.bisect_right(self._firsts, log_id) - 1
        r = self._by_first[i] if i >= 0 else None
        return r.name if r is not None and log_id in r else None

    def suspect(self, node_id: int, ttl_s: float = SUSPECT_S) -> None:
        """Leave ``node_id`` out of routing for a while (a connection to it failed)."""
        self._suspects[node_id] = time.monotonic() + ttl_s
        self._suspects_changed += 1

    def trust(self, node_id: int) -> None:
        """A connection to ``node_id`` worked: route to it again."""
        if self._suspects.pop(node_id, None) is not None:
            self._suspects_changed += 1

    def suspected(self, node_id: int) -> bool:
        until = self._suspects.get(node_id)
        if until is None:
            return False
        if until <= time.monotonic():
            del self._suspects[node_id]
            return False
        return True

    def sequencer_weights(self) -> dict[int, float]:
        """The nodes that may run sequencers now, with their weights (see the
        module docstring).  Worked out again only when what it rests on
        changed, or a suspicion ran out: every append asks."""
        now = time.monotonic()
        c = self._weights
        if (
            c is not None
            and c.nodes is self.nodes
            and c.members is self.members
            and c.alive is self.alive
            and c.dead is self.dead
            and c.unwilling is self.unwilling
            and c.suspects == self._suspects_changed
            and now < c.until
        ):
            return c.weights
        weights = self._sequencer_weights()
        until = min((t for t in self._suspects.values() if t > now), default=math.inf)
        old = self._weights
        self._weights = _Weights(
            self.nodes,
            self.members,
            self.alive,
            self.dead,
            self.unwilling,
            self._suspects_changed,
            until,
            weights,
        )
        # What it rests on is read again often (the members on every beat,
        # with their clock offsets) and mostly comes out the same: the
        # owners hashed so far stay right unless the weights moved.  (Every
        # append of a client missed here, hashing its log again: an eighth
        # of the client's time in one more record to each of 10,000 logs.)
        if old is None or old.weights != weights:
            self._owners = {}
        return weights

    def _sequencer_weights(self) -> dict[int, float]:
        up = self.up
        candidates = [
            n
            for n in self.nodes.values()
            if n.node_id in up and "sequencer" in n.roles and not self.suspected(n.node_id)
        ]
        members, unwilling = self.members, self.unwilling
        willing = [
            n for n in candidates if members[n.node_id].sequencer and n.node_id not in unwilling
        ]
        return {n.node_id: n.weight for n in willing or candidates}

    def sequencer_node(self, log_id: int) -> int | None:
        """The live node that runs ``log_id``'s sequencer (rendezvous hashing;
        remembered until the weights change)."""
        weights = self.sequencer_weights()
        owners = self._owners
        if log_id in owners:
            return owners[log_id]
        owner = rendezvous_owner(log_id, weights)
        if len(owners) >= OWNERS_KEPT_MAX:
            owners.clear()
        owners[log_id] = owner
        return owner

    def storage_weights(self) -> dict[int, float]:
        return {n.node_id: n.weight for n in self.nodes.values() if "storage" in n.roles}

    def domains(self, scope: str) -> dict[int, str]:
        return {n.node_id: n.domain(scope) for n in self.nodes.values()}

"""The trio shell around the failure detector (``_detector``): gossip out
every ``gossip_s``, take gossip in, and tell the cluster view (and so the
routing, the sequencers' copysets and recovery) which members are dead and
which take no sequencers.  A node that finds it was paused or cut off holds
down (``_health_core``); a client that asks (``GetClusterState``) gets what
this node knows."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ..errors import Status
from ..wire import ClusterState, GetClusterState, Gossip

if TYPE_CHECKING:
    from ..epochstore import Members
    from ..net import Connection
    from ..rpc import ClusterView
    from ._detector import FailureDetector
    from ._health import Health
    from ._metrics import NodeMetrics
    from ._peers import Peers

_log = logging.getLogger("logstrand.node")


class Gossiper:
    def __init__(
        self,
        detector: FailureDetector,
        view: ClusterView,
        peers: Peers,
        health: Health,
        metrics: NodeMetrics,
        interval_s: float,
    ) -> None:
        self.detector = detector
        self.view = view
        self.peers = peers
        self.health = health
        self.metrics = metrics
        self.interval_s = interval_s
        self.node_id = detector.node_id
        self._dead: frozenset[int] = frozenset()

    def on_members(self, members: Members) -> None:
        """The view read the membership (a view listener)."""
        self.detector.set_members(members, trio.current_time())
        self._apply(trio.current_time())

    async def run(self) -> None:
        detector = self.detector
        while True:
            now = trio.current_time()
            why = detector.look(now)
            if why is not None:
                _log.warning(
                    "node %d: %s; other nodes may have taken its sequencers: it holds down",
                    self.node_id,
                    why,
                )
                self.health.hold_down(why)
            self._apply(now)
            ages = detector.ages_ms(now)
            flat = tuple(x for pair in sorted(ages.items()) for x in pair)
            msg = Gossip(self.node_id, flat, self.health.said.sequencer)
            for node in detector.gossip_to():
                self.peers.send_lightly(node, msg)
            await trio.sleep(self.interval_s)

    async def handle_gossip(self, conn: Connection, msg: Gossip) -> None:
        now = trio.current_time()
        self.detector.on_gossip(msg.node_id, msg.age_map(), msg.sequencer, now)
        self._apply(now)

    async def handle_cluster_state(self, conn: Connection, msg: GetClusterState) -> None:
        await conn.send(
            ClusterState(
                msg.request_id,
                int(Status.OK),
                tuple(sorted(self.view.dead)),
                tuple(sorted(self.view.unwilling)),
            )
        )

    def said_changed(self) -> None:
        """What this node says of itself changed: route by it now, not at
        the next round (its peers hear it with that round's gossip)."""
        self._apply(trio.current_time())

    def _apply(self, now: float) -> None:
        detector = self.detector
        dead = detector.dead(now)
        if dead != self._dead:
            for n in dead - self._dead:
                _log.warning(
                    "node %d: no word of node %d for %.1f s: taken as dead (routing goes "
                    "around it)",
                    self.node_id,
                    n,
                    detector.dead_after_s,
                )
            for n in self._dead - dead:
                if detector.is_member(n):
                    _log.info("node %d: word of node %d again", self.node_id, n)
                else:
                    _log.info("node %d: node %d left the membership", self.node_id, n)
            self._dead = dead
            self.metrics.nodes_dead.set(len(dead))
        unwilling = set(detector.unwilling())
        said = self.health.said
        if not said.sequencer:
            unwilling.add(self.node_id)
        self.view.set_health(dead, frozenset(unwilling))

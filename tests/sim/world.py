"""A seeded, deterministic simulation of a logstrand cluster.

What runs is the production protocol code: the sequencer core
(``SequencerCore``), activation, sealing and recovery
(``sequencer._procedures``, driven here instead of by trio), the nodes'
rules (``storage._rules``) on real ``LogsDB`` instances over in-memory
engines that lose unsynced writes on a crash, the epoch store's shared logic
(``MemoryEpochStore``), and the reader's merge (``ReaderCore``).  What is
simulated is time, the network and failure:

* every message may be dropped, duplicated, delayed (now and then by a lot,
  which reorders it behind later ones);
* nodes crash (their sequencers, recoveries and unsynced writes vanish) and
  restart; they are paused (SIGSTOP) and resumed, which leaves a stale
  sequencer running behind the others' backs;
* clients disagree about which node runs the sequencer, so several
  sequencers race and preempt one another.

One ``random.Random(seed)`` decides everything, and nothing else varies: the
same seed replays the same run, event for event (``World.digest`` is a hash
of the trace).  After the faults stop, the cluster heals, a last append
proves it can make progress, and ``checks.check`` holds the outcome to the
promises: every acknowledged record is read exactly once at its LSN; all
readers see the same items; an append acknowledged before another was sent
has the lower LSN; gaps are HOLE or BRIDGE only, never over an acknowledged
LSN; and a record a node ever treated as released is in the final log
unchanged.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import random
from collections import deque
from typing import TYPE_CHECKING, Any

from logstrand.epochstore import LogAttributes, NodeConfig
from logstrand.testing import MemoryEpochStore
from logstrand.wire import (
    Append,
)

if TYPE_CHECKING:
    from collections.abc import Callable


import attrs

from . import checks
from .client import SimClient
from .config import CLIENT_BASE, LOG, SAME_INSTANT_EVENTS_MAX, Address, Config, Violation
from .node import Endpoint, SimNode
from .tiering import TIER_AFTER_MS, SimTier, check_tiered
from .txn_client import SimTxnClient, TxnTruth

__all__ = ["Config", "Violation", "World", "run_seed"]


class World:
    def __init__(self, seed: int, config: Config | None = None) -> None:
        self.seed = seed
        self.config = config or Config.for_seed(seed)
        self.rng = random.Random(seed)
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._hash = hashlib.sha256()
        self.trace: deque[str] = deque(maxlen=400)
        self.faults = True
        self.estore = MemoryEpochStore()
        cfg = self.config
        #: Tiered storage's object store and rounds (``Config.tiering``).
        self.tier = SimTier(self) if cfg.tiering else None
        self.nodes = {i: SimNode(self, i) for i in range(1, cfg.nodes + 1)}
        kind = SimTxnClient if cfg.transactions else SimClient
        self.clients = {
            CLIENT_BASE + i: kind(self, CLIENT_BASE + i) for i in range(1, cfg.clients + 1)
        }
        #: Every transaction begun, as its producer knows it (``txn_client``).
        self.txns: list[TxnTruth] = []
        self.endpoints: dict[int, Endpoint] = {**self.nodes, **self.clients}
        # What readers were handed during the run, to hold the final log to it.
        self.snapshots: list[tuple[int, list[tuple[str, int, int, bytes | None]]]] = []
        #: Acknowledged payloads some reader has read (liveness owes them no more).
        self.confirmed: set[bytes] = set()
        self.stats: dict[str, int] = dict.fromkeys(
            ["sent", "dropped", "duplicated", "crashes", "pauses", "activations", "stalls"], 0
        )
        self.stats["swaps"] = 0
        #: The most activations one node had waiting behind its bound.
        self.stats["queued"] = 0
        #: Sequencers moved to a new epoch by a renewal (host rule 8).
        self.stats["renewed"] = 0
        #: Nodes told to stop, and the epochs their sequencers ended (``SimNode.stop``).
        self.stats["stops"] = 0
        self.stats["epochs_ended"] = 0
        self.attributes = LogAttributes(
            replication_factor=self.config.replication, durability="fsync"
        )
        if cfg.tiering:
            self.attributes = attrs.evolve(
                self.attributes,
                tier_after_ms=TIER_AFTER_MS,
                local_retention_ms=cfg.local_retention_ms,
            )
        # Membership as the epoch store has it (leases), and its version.
        self.members: frozenset[int] = frozenset()
        self.members_version = 0
        # Since when enough nodes are up, and none paused (None: not now).
        self.serviceable_since: float | None = None
        self.liveness_checks = 0
        #: Payloads removed on purpose (trimmed, compacted away): no reader owes them.
        self.excused: set[bytes] = set()
        #: Nodes whose lost copies rebuilding re-created (AUTHORITATIVE_EMPTY).
        self.rebuilt: frozenset[int] = frozenset()

    # scheduling

    def at(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._queue, (self.now + max(delay, 0.0), next(self._order), fn, args))

    def run_until(self, t: float) -> None:
        same_instant = 0
        while self._queue and self._queue[0][0] <= t:
            when, _, fn, args = heapq.heappop(self._queue)
            same_instant = same_instant + 1 if when == self.now else 0
            if same_instant > SAME_INSTANT_EVENTS_MAX:
                raise Violation(f"livelock: {same_instant} events at t={when:.4f} ({fn.__name__})")
            self.now = when
            fn(*args)
        self.now = max(self.now, t)

    def note(self, text: str) -> None:
        line = f"{self.now:9.4f} {text}"
        self.trace.append(line)
        self._hash.update(line.encode())

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()

    def clock_ms(self) -> int:
        return 1_700_000_000_000 + int(self.now * 1000)

    # network

    def send(self, src: Address, dst: int | Address, msg: Any) -> None:
        """Send ``msg`` from ``src`` to a node (its incarnation now) or to an address.

        Messages travel on connections: one that reaches a later incarnation
        of its destination than it was sent to is lost with the connection.
        """
        cfg = self.config
        self.stats["sent"] += 1
        to: Address = dst if isinstance(dst, tuple) else (dst, self.endpoints[dst].incarnation)
        if src[0] == to[0]:
            self.at(0.0, self._deliver, src, to, msg)  # loopback: never lost
            return
        if self.faults and self.rng.random() < cfg.drop:
            self.stats["dropped"] += 1
            return
        # Peers' messages may arrive twice (a resend after a reconnect); an
        # APPEND never does: TCP does not duplicate, and a client that retries
        # sends a new append (its payloads are unique, so the checker can tell).
        dup = self.faults and not isinstance(msg, Append) and self.rng.random() < cfg.duplicate
        copies = 2 if dup else 1
        self.stats["duplicated"] += copies - 1
        for _ in range(copies):
            delay = self.rng.expovariate(1 / cfg.delay_mean_s)
            if self.faults and self.rng.random() < cfg.delay_tail:
                delay += self.rng.uniform(0.05, 0.5)
            self.at(delay, self._deliver, src, to, msg)

    def _deliver(self, src: Address, to: Address, msg: Any) -> None:
        ep = self.endpoints[to[0]]
        if not ep.up or ep.incarnation != to[1]:
            return  # the connection died with the process it led to
        if ep.paused_until > self.now:
            # Stopped: the message waits in the socket until the process resumes.
            self.at(ep.paused_until - self.now, self._deliver, src, to, msg)
            return
        ep.receive(src, msg)

    # membership

    def _set_members(self, members: frozenset[int]) -> None:
        if members == self.members:
            return
        self.members = members
        self.members_version += 1
        self.estore.set_alive(members)
        version = self.members_version
        for node in self.nodes.values():
            # Each node's watch fires a little late, each at its own time.
            self.at(
                self.rng.uniform(0.005, self.config.watch_delay_s), node.set_view, members, version
            )

    def join(self, node_id: int) -> None:
        self._set_members(self.members | {node_id})
        self.check_service()

    def left(self, node_id: int) -> None:
        """A node that stopped gave its membership up: no lease to run out."""
        self._set_members(self.members - {node_id})
        self.check_service()

    def leave(self, node_id: int, incarnation: int) -> None:
        """A crashed node stays a member until its lease runs out (unless it
        came back meanwhile)."""
        self.check_service()

        def expire() -> None:
            if self.nodes[node_id].incarnation == incarnation and not self.nodes[node_id].up:
                self._set_members(self.members - {node_id})

        self.at(self.rng.uniform(0.5, 1.0) * self.config.lease_s, expire)

    def check_service(self) -> None:
        """Track whether the faults allow progress: at least R nodes and an
        f-majority of the nodeset up, and none paused."""
        cfg = self.config
        need = max(cfg.replication, cfg.nodes - cfg.replication + 1)
        up = [n for n in self.nodes.values() if n.up]
        paused = any(n.paused_until > self.now for n in up)
        # Tiered records are read from the object store: it is needed too.
        store_down = self.tier is not None and self.tier.store.down_until > self.now
        ok = len(up) >= need and not paused and not store_down
        if not ok:
            self.serviceable_since = None
        elif self.serviceable_since is None:
            self.serviceable_since = self.now

    # faults

    def _fault(self) -> None:
        if not self.faults:
            return
        cfg = self.config
        rng = self.rng
        up = [n for n in self.nodes.values() if n.up]
        down = len(self.nodes) - len(up)
        self.at(rng.expovariate(1 / cfg.fault_every_s), self._fault)
        if not up:
            return
        if self.tier is not None and rng.random() < 0.3:
            self.tier.store.fault()
            self.check_service()
            self.at(self.tier.store.down_until - self.now, self.check_service)
            return
        # Prefer the nodes that run a sequencer: their death is what recovery is for.
        seqs = [n for n in up if n.sequencer is not None]
        victim = rng.choice(seqs) if seqs and rng.random() < 0.6 else rng.choice(up)
        dead = [n for n in self.nodes.values() if not n.up]
        if dead and seqs and rng.random() < 0.4:
            # Back to back: a node that was down comes back, and at once the
            # sequencer's node dies, while every view still has the dead one
            # as a member and some do not have the returning one yet.
            back = rng.choice(dead)
            victim = rng.choice(seqs)
            self.stats["swaps"] += 1
            self.note(f"swap: node {back.id} back, node {victim.id} killed")
            back.start()
            self.at(rng.uniform(0.0, 0.08), self._crash_if, victim, victim.incarnation, True)
            return
        if rng.random() < 0.7 and down < cfg.down_max:
            if cfg.stop_share and rng.random() < cfg.stop_share:
                victim.stop()  # it restarts itself once gone
                return
            victim.crash()
            self.at(rng.uniform(0.1, 2.0), victim.start)
        elif victim.paused_until <= self.now:
            victim.pause(rng.uniform(0.2, 2.0))

    def _renew(self) -> None:
        """``logs rebalance``: every node is asked to move the sequencers of
        a few logs to new epochs (host rule 8) while appends go on."""
        if not self.faults:
            return
        self.at(self.rng.uniform(0.3, 1.0), self._renew)
        logs = self.rng.sample(self.config.log_ids, min(10, self.config.logs))
        self.note(f"renew logs {logs}")
        for node in self.nodes.values():
            if node.up:
                node.renew(logs)

    def crash_during_recovery(self, node: SimNode) -> None:
        """Sometimes kill a node right after it started a recovery."""
        if self.faults and self.rng.random() < 0.15:
            down = sum(not n.up for n in self.nodes.values())
            if down < self.config.down_max:
                inc = node.incarnation
                self.at(self.rng.uniform(0.0, 0.05), self._crash_if, node, inc)

    def _crash_if(self, node: SimNode, incarnation: int, swap: bool = False) -> None:
        down = sum(not n.up for n in self.nodes.values())
        if node.alive(incarnation) and self.faults and (swap or down < self.config.down_max):
            node.crash()
            self.at(self.rng.uniform(0.1, 1.0), node.start)

    # the run

    def run(self) -> None:
        cfg = self.config
        for n in self.nodes:
            self.estore.add_node(NodeConfig(n, f"127.0.0.1:{4000 + n}"))
        self.estore.create_logs(LOG, LOG + cfg.logs - 1, self.attributes)
        for node in self.nodes.values():
            node.start()
        for client in self.clients.values():
            self.at(self.rng.uniform(0, 0.05), client.tick)
        self.at(self.rng.expovariate(1 / cfg.fault_every_s), self._fault)
        if cfg.logs > 1:
            self.at(0.5, self._renew)
        self.at(0.5, self._snapshot)
        self.run_until(cfg.duration_s)
        # Heal: no more faults; every node up and running.
        self.faults = False
        for client in self.clients.values():
            client.appending = False
        if self.tier is not None:  # the object store heals too (what it lost stays lost)
            store = self.tier.store
            store.down_until = store.slow_until = store.error_rate = 0.0
        for node in self.nodes.values():
            if not node.up:
                node.start()
            node.paused_until = min(node.paused_until, self.now)
        self.check_service()
        # Let every request in flight end, then prove every log makes
        # progress: one more append to each, retried until acknowledged.
        self.run_until(self.now + 12.0)
        fence = self.clients[CLIENT_BASE + 1]
        for log in cfg.log_ids:
            fence.fence(log)
        for _ in range(60):
            self.run_until(self.now + 1.0)
            if all(self._all_released(log, fence.fenced.get(log)) for log in cfg.log_ids):
                break
        else:
            stuck = [
                log for log in cfg.log_ids if not self._all_released(log, fence.fenced.get(log))
            ]
            raise Violation(f"logs {stuck[:10]} made no progress after healing\n{self.tail()}")

    def _all_released(self, log: int, lsn: int | None) -> bool:
        return lsn is not None and all(n.released(log) >= lsn for n in self.nodes.values())

    def tail(self) -> str:
        return "\n".join(self.trace)

    # reading and checking

    def _snapshot(self) -> None:
        """Readers now, of everything released, off the nodes that answer
        now: of every log with acknowledged records no reader saw yet."""
        answering = [
            n for n, node in self.nodes.items() if node.up and node.paused_until <= self.now
        ]
        got: set[bytes] = set()
        logs = checks.unconfirmed_logs(self)
        for log in logs:
            until = max((self.nodes[n].released(log) for n in answering), default=0)
            if not until:
                continue
            scd = self.rng.random() < 0.7
            items = checks.read(
                self,
                until,
                log=log,
                scd=scd,
                answering=answering,
                partial=True,
                empty=self.rebuilt,
            )
            flat = checks.flatten(items)
            self.snapshots.append((log, flat))
            if self.config.transactions:
                checks.check_committed(self, log, items, final=False)
            # (A record without a payload is never acknowledged: nothing to count.)
            got.update(p for kind, _, _, p in flat if kind == "record" and p is not None)
        checks.check_liveness(self, got, set(logs))
        # Fewer once healed: the liveness bound is what they are for then.
        self.at(self.rng.uniform(0.2, 1.0) * (1 if self.faults else 3), self._snapshot)


def _flags(config: Config) -> str:
    """The command line's switch for a run of this shape ('' for ``for_seed``'s)."""
    if config.tiering:
        return " --tiering"
    if config.transactions:
        return " --transactions"
    return " --many-logs" if config.logs > 1 else ""


def run_seed(seed: int, config: Config | None = None) -> tuple[World, dict[str, Any]]:
    """One whole run; raises Violation (with the seed and the trace's tail) on failure."""
    world = World(seed, config)
    try:
        world.run()
        summary = checks.check(world)
        if world.tier is not None:
            summary |= check_tiered(world)
    except Violation as exc:
        raise Violation(
            f"seed {seed} ({world.config}): {exc}\n"
            f"replay: python -m tests.sim --seed {seed}{_flags(world.config)} --trace\n"
            f"last events:\n{world.tail()}"
        ) from None
    return world, summary

"""A seeded, deterministic simulation of a logstrand cluster.

What runs is the production protocol code: the sequencer core
(``SequencerCore``), activation, sealing and recovery
(``sequencer._procedures``, driven here instead of by trio), the nodes'
rules (``storage._core``) on real ``LogsDB`` instances over in-memory
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
proves it can make progress, and ``check`` holds the outcome to the
promises: every acknowledged record is read exactly once at its LSN; all
readers see the same items; an append acknowledged before another was sent
has the lower LSN; gaps are HOLE or BRIDGE only, never over an acknowledged
LSN; and a record a node ever treated as released is in the final log
unchanged.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import random
from collections import deque
from typing import TYPE_CHECKING, Any

import attrs

from logstrand.client._reader_core import (
    GapItem,
    GrantCredit,
    ReaderCore,
    RecordRun,
    StartStream,
)
from logstrand.epochstore import LogAttributes, NodeConfig, Placement
from logstrand.errors import LogstrandError, Status
from logstrand.logsdb import PutBatch
from logstrand.placement import CopysetSelector, rendezvous_owner
from logstrand.sequencer import ReplyAppend, SendRelease, SendStore, SequencerCore
from logstrand.sequencer import _procedures as procs
from logstrand.sequencer._host import (
    Activate,
    HostOptions,
    Recover,
    RecoveryStalled,
    ReplySeqState,
    SequencerHostCore,
)
from logstrand.storage import _core as node_rules
from logstrand.storage._read_core import EMPTY as EMPTY_BATCH
from logstrand.storage._read_core import ReadFrom, ReadStreamCore, Report
from logstrand.storage._release_watch import ReleaseWatch
from logstrand.testing import MemoryEngine, MemoryEpochStore, memory_logsdb
from logstrand.types import GapType
from logstrand.wire import (
    Append,
    AppendReply,
    Digest,
    GetDigest,
    GetSeqState,
    LogInfo,
    LogInfoReply,
    RecordBatch,
    Release,
    Seal,
    SealReply,
    SeqState,
    Store,
    StoreReply,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from logstrand.logsdb import LogsDB

LOG = 1
CLIENT_BASE = 100
#: More events than this at one instant of simulated time is a livelock
#: (something retries at once, for ever).
SAME_INSTANT_EVENTS_MAX = 100_000
Address = tuple[int, int]  # (endpoint id, incarnation)


@attrs.frozen
class Config:
    nodes: int = 4
    replication: int = 2
    clients: int = 3
    #: Seconds of simulated time with appends and faults.
    duration_s: float = 8.0
    drop: float = 0.02
    duplicate: float = 0.02
    delay_mean_s: float = 0.002
    #: Chance that a message is held back 50-500 ms (reordering it).
    delay_tail: float = 0.03
    #: Mean seconds between faults (crash, pause).
    fault_every_s: float = 1.0
    #: At most this many nodes down (crashed) at once.
    down_max: int = 1
    append_every_s: float = 0.02
    in_flight_max: int = 4
    #: Membership: a crashed node stays a member until its lease runs out
    #: (up to this long); a change reaches each node's view up to
    #: ``watch_delay_s`` late.
    lease_s: float = 1.5
    watch_delay_s: float = 0.25
    #: The sequencer host's bound on a recovery (``--recovery-stall``).
    recovery_stall_s: float = 3.0
    #: Liveness: an acknowledged record must be readable this long after its
    #: acknowledgement, once enough nodes have been up (and none paused) for
    #: as long (``check_liveness``).
    liveness_s: float = 8.0
    #: Bugs to plant on purpose, to show the checkers catch them.
    break_sealing: bool = False  # nodes take every STORE, sealed or not
    break_release: bool = False  # sequencers release before recovery is done
    break_store_ids: bool = False  # each sequencer core numbers its STOREs from 1
    #: Idle sequencers retire when the log's owner moves, recovered or not
    #: (the failover stall: acknowledged records unreadable for minutes).
    break_retire: bool = False
    #: Nodes never ask for a release that is overdue (``ReleaseWatch``).
    break_release_watch: bool = False

    @classmethod
    def for_seed(cls, seed: int) -> Config:
        """A configuration drawn from the seed: runs differ in shape, not just in luck."""
        rng = random.Random(seed ^ 0x5EED)
        nodes = rng.choice([3, 4, 5])
        return cls(
            nodes=nodes,
            replication=rng.choice([2, 2, 3]) if nodes > 3 else 2,
            clients=rng.randint(1, 4),
            drop=rng.choice([0.0, 0.01, 0.05]),
            duplicate=rng.choice([0.0, 0.02, 0.1]),
            delay_tail=rng.choice([0.0, 0.03, 0.1]),
            fault_every_s=rng.choice([0.3, 1.0, 3.0]),
            down_max=rng.choice([1, 1, 2]),
        )


class Violation(AssertionError):
    pass


# -- time and network -----------------------------------------------------------


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
        self.nodes = {i: SimNode(self, i) for i in range(1, cfg.nodes + 1)}
        self.clients = {
            CLIENT_BASE + i: SimClient(self, CLIENT_BASE + i) for i in range(1, cfg.clients + 1)
        }
        self.endpoints: dict[int, Endpoint] = {**self.nodes, **self.clients}
        # What readers were handed during the run, to hold the final log to it.
        self.snapshots: list[list[tuple[str, int, int, bytes | None]]] = []
        self.stats: dict[str, int] = dict.fromkeys(
            ["sent", "dropped", "duplicated", "crashes", "pauses", "activations", "stalls"], 0
        )
        self.stats["swaps"] = 0
        self.attributes = LogAttributes(
            replication_factor=self.config.replication, durability="fsync"
        )
        # Membership as the epoch store has it (leases), and its version.
        self.members: frozenset[int] = frozenset()
        self.members_version = 0
        # Since when enough nodes are up, and none paused (None: not now).
        self.serviceable_since: float | None = None
        self.liveness_checks = 0

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
        ok = len(up) >= need and not paused
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
            victim.crash()
            self.at(rng.uniform(0.1, 2.0), victim.start)
        elif victim.paused_until <= self.now:
            victim.pause(rng.uniform(0.2, 2.0))

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
        self.estore.create_logs(LOG, LOG, self.attributes)
        for node in self.nodes.values():
            node.start()
        for client in self.clients.values():
            self.at(self.rng.uniform(0, 0.05), client.tick)
        self.at(self.rng.expovariate(1 / cfg.fault_every_s), self._fault)
        self.at(0.5, self._snapshot)
        self.run_until(cfg.duration_s)
        # Heal: no more faults; every node up and running.
        self.faults = False
        for client in self.clients.values():
            client.appending = False
        for node in self.nodes.values():
            if not node.up:
                node.start()
            node.paused_until = min(node.paused_until, self.now)
        self.check_service()
        # Let every request in flight end, then prove the log makes progress:
        # one more append, retried until acknowledged.
        self.run_until(self.now + 12.0)
        fence = self.clients[CLIENT_BASE + 1]
        fence.fence()
        for _ in range(60):
            self.run_until(self.now + 1.0)
            if fence.fenced is not None and self._all_released(fence.fenced):
                break
        else:
            raise Violation(f"the log made no progress after healing\n{self.tail()}")

    def _all_released(self, lsn: int) -> bool:
        return all(n.release.get(LOG, 0) >= lsn for n in self.nodes.values())

    def tail(self) -> str:
        return "\n".join(self.trace)

    # reading and checking

    def _snapshot(self) -> None:
        """A reader now, of everything released, off the nodes that answer now."""
        answering = [
            n for n, node in self.nodes.items() if node.up and node.paused_until <= self.now
        ]
        until = max((self.nodes[n].release.get(LOG, 0) for n in answering), default=0)
        flat: list[tuple[str, int, int, bytes | None]] = []
        if until:
            scd = self.rng.random() < 0.7
            flat = _flatten(self.read(until, scd=scd, answering=answering, partial=True))
            self.snapshots.append(flat)
        self.check_liveness(flat)
        # Fewer once healed: the liveness bound is what they are for then.
        self.at(self.rng.uniform(0.2, 1.0) * (1 if self.faults else 3), self._snapshot)

    def check_liveness(self, read: list[tuple[str, int, int, bytes | None]]) -> None:
        """Every acknowledged record is readable ``liveness_s`` after it was
        acknowledged, once the faults allow it: enough nodes up, none paused,
        for that long.  Faults may go on meanwhile (a node crashing while
        enough others stay up, a node coming back, lost and late messages).
        """
        since = self.serviceable_since
        if since is None:
            return
        bound = self.config.liveness_s
        got = {payload for kind, _, _, payload in read if kind == "record"}
        for client in self.clients.values():
            for payload, acked_at in client.acked_at.items():
                if self.now - max(acked_at, since) > bound and payload not in got:
                    raise Violation(
                        f"liveness: {payload!r}, acknowledged at {acked_at:.3f} as "
                        f"{client.acked[payload]:#x}, is not readable at {self.now:.3f}, "
                        f"with enough nodes up since {since:.3f}"
                    )
        self.liveness_checks += 1

    def read(
        self,
        until: int,
        *,
        scd: bool,
        down: tuple[int, ...] = (),
        answering: list[int] | None = None,
        partial: bool = False,
    ) -> list[Any]:
        """Read the log with the real ReaderCore off the nodes' LogsDBs.

        ``down``: nodes the reader is told are down; nodes not ``answering``
        never answer (the reader finds out).  ``partial``: return what was
        delivered when the reader cannot go on (too few nodes to decide).
        """
        nodeset = tuple(sorted(self.nodes))
        core = ReaderCore(LOG, 0, until, nodeset, self.config.replication, scd=scd, credit=64)
        answering = list(nodeset) if answering is None else answering
        streams = {n: _ReadEndpoint(self.nodes[n]) for n in answering}
        for n in down:
            core.on_unreachable(n, 0.0)
        for n in nodeset:
            if n not in streams:
                core.on_unreachable(n, 0.0)
        items: list[Any] = []
        now = 0.0
        rng = random.Random(self.seed * 7 + len(down))
        for _ in range(200_000):
            core.poll(now)
            got, actions = core.take()
            items += got
            for a in actions:
                if a.node_id in streams:
                    streams[a.node_id].act(a)
            if core.done:
                return items
            order = list(streams.values())
            rng.shuffle(order)
            if not any(s.pump(core, now) for s in order):
                if partial and now > 10.0:
                    return items
                now += 1.0
        if partial:
            return items
        raise Violation(f"reader made no progress (healthy={core.healthy})")

    def check(self) -> dict[str, Any]:
        """Hold the run to the promises; raise Violation with the seed if one breaks."""
        acked: dict[bytes, int] = {}
        issued: list[tuple[float, float, int]] = []  # (sent, acked, lsn)
        attempted: set[bytes] = set()
        for client in self.clients.values():
            acked.update(client.acked)
            issued += client.history
            attempted |= client.attempted
        until = max(acked.values())
        readers = [
            self.read(until, scd=True),
            self.read(until, scd=False),
            self.read(until, scd=True, down=(self.rng.choice(sorted(self.nodes)),)),
        ]
        flat = [_flatten(items) for items in readers]
        for other in flat[1:]:
            if other != flat[0]:
                diff = next(
                    i for i, (a, b) in enumerate(zip(flat[0], other, strict=False)) if a != b
                )
                raise Violation(
                    f"readers disagree at item {diff}: {flat[0][diff : diff + 3]} vs "
                    f"{other[diff : diff + 3]}"
                )
        log = flat[0]
        seen: dict[bytes, int] = {}
        last = 0
        for kind, lo, hi, payload in log:
            if lo <= last:
                raise Violation(f"LSN {lo:#x} delivered after {last:#x}")
            last = hi
            if kind == "record":
                assert payload is not None
                if payload in seen:
                    raise Violation(f"{payload!r} at {seen[payload]:#x} and again at {lo:#x}")
                if payload not in attempted:
                    raise Violation(f"{payload!r} at {lo:#x} was never appended")
                seen[payload] = lo
            elif kind not in (GapType.HOLE.name, GapType.BRIDGE.name):
                raise Violation(f"{kind} gap {lo:#x}..{hi:#x}")
        for payload, lsn in acked.items():
            if seen.get(payload) != lsn:
                where = seen.get(payload)
                raise Violation(
                    f"acknowledged {payload!r} at {lsn:#x} is "
                    + ("missing" if where is None else f"at {where:#x}")
                )
        # An append acknowledged before another was sent has the lower LSN.
        issued.sort(key=lambda x: x[1])
        acked_before = 0
        by_sent = sorted(issued)
        i = 0
        for sent, _, lsn in by_sent:
            while i < len(issued) and issued[i][1] < sent:
                acked_before = max(acked_before, issued[i][2])
                i += 1
            if lsn <= acked_before:
                raise Violation(f"append sent at {sent:.4f} got {lsn:#x} <= {acked_before:#x}")
        # Whatever a reader was handed during the run is what the log says in the end.
        final = {lo: payload for kind, lo, _, payload in log if kind == "record"}
        records = sorted(final)
        for k, snap in enumerate(self.snapshots):
            for kind, lo, hi, payload in snap:
                if lo > until:
                    break
                if kind == "record":
                    if final.get(lo) != payload:
                        raise Violation(
                            f"reader {k} got {payload!r} at {lo:#x}; in the end it is "
                            f"{final.get(lo)!r}"
                        )
                else:
                    i = bisect.bisect_left(records, lo)
                    if i < len(records) and records[i] <= hi:
                        raise Violation(
                            f"reader {k} got a {kind} gap {lo:#x}..{hi:#x}; in the end "
                            f"{records[i]:#x} is a record"
                        )
        return {
            "acked": len(acked),
            "records": len(seen),
            "gaps": sum(1 for k, *_ in log if k != "record"),
            "epochs": self.estore.log_epochs(LOG).next_epoch - 1,
            "snapshots": len(self.snapshots),
            **self.stats,
        }


def _flatten(items: list[Any]) -> list[tuple[str, int, int, bytes | None]]:
    out: list[tuple[str, int, int, bytes | None]] = []
    for it in items:
        if isinstance(it, RecordRun):
            out += [("record", lsn, lsn, p) for lsn, p in zip(it.lsns, it.payloads, strict=True)]
        elif isinstance(it, GapItem):
            out.append((it.type.name, it.lo, it.hi, None))
    return out


# -- endpoints ---------------------------------------------------------------------


class Endpoint:
    def __init__(self, world: World, endpoint_id: int) -> None:
        self.world = world
        self.id = endpoint_id
        self.up = True
        self.incarnation = 1
        self.paused_until = 0.0

    def receive(self, src: Address, msg: Any) -> None:
        raise NotImplementedError

    def send(self, dst: int | Address, msg: Any) -> None:
        self.world.send((self.id, self.incarnation), dst, msg)


class SimNode(Endpoint):
    """A storage node: LogsDB, the node's rules, and the production sequencer
    host core (``SequencerHostCore``), driven here instead of by trio."""

    def __init__(self, world: World, node_id: int) -> None:
        super().__init__(world, node_id)
        self.up = False
        self.engine = MemoryEngine()
        self.db: LogsDB | None = None
        self.incarnation = 0
        self.release: dict[int, int] = {}
        self.host = SequencerHostCore(node_id)
        self.replies: dict[int, Callable[[Any], None]] = {}
        self.ids = itertools.count(1)
        self.watch = ReleaseWatch()
        #: This node's view of the membership (it lags the epoch store's).
        self.view: frozenset[int] = frozenset()
        self._view_version = -1
        #: Nodes a connection to failed lately: left out of routing (as
        #: ``ClusterView.suspect``), until the time given.
        self.suspects: dict[int, float] = {}

    @property
    def sequencer(self) -> SequencerCore | None:
        return self.host.sequencer(LOG)

    # life

    def start(self) -> None:
        if self.up:
            return
        world = self.world
        self.up = True
        self.incarnation += 1
        self.db = memory_logsdb(self.engine, clock_ms=world.clock_ms)
        self.release = {log: self.db.release_pointer(log) for log in self.db.logs()}
        self.watch = ReleaseWatch()
        for log, release in self.release.items():
            self.watch.stored(log, self.db.last_lsn(log), release, world.now)
        host_class = _RetireWhenIdle if world.config.break_retire else SequencerHostCore
        self.host = host_class(self.id, HostOptions(recovery_stall_s=world.config.recovery_stall_s))
        self.suspects.clear()
        world.note(f"node {self.id} starts (incarnation {self.incarnation})")
        world.join(self.id)
        # A node reads the membership when it starts.
        self.set_view(world.members, world.members_version)
        world.at(0.05, self._tick, self.incarnation)

    def crash(self) -> None:
        self.world.note(f"node {self.id} crashes")
        self.world.stats["crashes"] += 1
        self.up = False
        self.engine.crash()  # unsynced writes are gone
        self.db = None
        self.host = SequencerHostCore(self.id)
        self.replies.clear()
        self.paused_until = 0.0
        self.world.leave(self.id, self.incarnation)

    def pause(self, seconds: float) -> None:
        self.world.note(f"node {self.id} paused for {seconds:.3f}s")
        self.world.stats["pauses"] += 1
        self.paused_until = self.world.now + seconds
        self.world.check_service()
        self.world.at(seconds, self.world.check_service)

    def alive(self, incarnation: int) -> bool:
        return self.up and self.incarnation == incarnation

    def set_view(self, members: frozenset[int], version: int) -> None:
        """The membership watch fired (late, and maybe out of order: keep the newest)."""
        if not self.up or version <= self._view_version:
            return
        old, self.view, self._view_version = self.view, members, version
        now = self.world.now
        for n in members - old:
            self.suspects.pop(n, None)
            self.host.on_node_up(n)
        actions: list[Any] = []
        for n in old - members:
            actions += self.host.on_node_down(n, now)
        self._execute(actions)

    def reachable(self) -> set[int]:
        """Members not suspected: whom routing and recovery use."""
        now = self.world.now
        return {n for n in self.view if self.suspects.get(n, 0.0) <= now}

    def owner(self) -> int | None:
        return rendezvous_owner(LOG, dict.fromkeys(sorted(self.reachable() | {self.id}), 1.0))

    def _tick(self, incarnation: int) -> None:
        if not self.alive(incarnation):
            return
        now = self.world.now
        if self.paused_until <= now:
            self._execute(self.host.tick(now, lambda _log: self.owner()))
            for log in self.watch.due(now):
                if not self.world.config.break_release_watch:
                    self._ask_for_release(log)
        self.world.at(0.05, self._tick, incarnation)

    def _ask_for_release(self, log: int) -> None:
        """Copies stay unreleased here: have the owner run a sequencer (``ReleaseWatch``)."""
        owner = self.owner()
        if owner is None:
            return
        rid = next(self.ids)

        def on_reply(reply: SeqState) -> None:
            self.replies.pop(rid, None)
            if reply.status == Status.OK:
                self.on_release(log, reply.released_lsn)

        self.replies[rid] = on_reply
        self.send(owner, GetSeqState(rid, log))

    def send(self, dst: int | Address, msg: Any) -> None:
        world = self.world
        to = dst if isinstance(dst, int) else dst[0]
        if to in world.nodes and not world.nodes[to].up and to != self.id:
            # Connection refused: the sender finds out at once and suspects
            # it, and a STORE fails at once (the node's shell answers for it).
            self.suspects[to] = world.now + 2.0
            if isinstance(msg, Store):
                fail = StoreReply(msg.store_id, msg.log_id, int(Status.CONNFAILED), to)
                world.at(0.0, self._deliver_local, self.incarnation, fail)
                return
        super().send(dst, msg)

    def _deliver_local(self, incarnation: int, msg: Any) -> None:
        if self.alive(incarnation):
            self.world._deliver((self.id, incarnation), (self.id, incarnation), msg)

    # messages

    def receive(self, src: Address, msg: Any) -> None:
        db = self.db
        assert db is not None
        if isinstance(msg, Store):
            self._store(src, msg)
        elif isinstance(msg, Release):
            self.on_release(msg.log_id, msg.lsn)
        elif isinstance(msg, Seal | GetDigest | LogInfo):
            release = self.release.get(msg.log_id, 0)
            self.send(src, node_rules.answer(db, self.id, release, msg))
        elif isinstance(msg, Append):
            self._append(src, msg)
        elif isinstance(msg, StoreReply):
            if msg.store_id & procs.RECOVERY_STORE_BIT:
                self._reply_to(msg.store_id, msg)
            else:
                now = self.world.now
                self._execute(
                    self.host.on_stored(msg.log_id, msg.store_id, msg.node_id, msg.status, now)
                )
        elif isinstance(msg, GetSeqState):
            self._execute(
                self.host.on_seq_state(
                    msg.log_id,
                    (src, msg.request_id),
                    owner=self.owner(),
                    attributes=self.world.attributes,
                )
            )
        elif isinstance(msg, LogInfoReply | SealReply | Digest | SeqState):
            self._reply_to(msg.request_id, msg)

    def _reply_to(self, request_id: int, msg: Any) -> None:
        handler = self.replies.get(request_id)
        if handler is not None:
            handler(msg)

    def _store(self, src: Address, msg: Store) -> None:
        db = self.db
        assert db is not None
        admitted = self.world.config.break_sealing or node_rules.admit_store(db, msg)
        status = Status.PREEMPTED
        if admitted:
            if msg.released_lsn:
                self.on_release(msg.log_id, msg.released_lsn)
            db.write(
                [PutBatch(msg.log_id, msg.batch, msg.copyset, msg.wave)],
                sync=msg.sync,
                releases={msg.log_id: self.release.get(msg.log_id, 0)},
            )
            status = Status.OK
            if msg.batch.lsns:
                release = self.release.get(msg.log_id, 0)
                self.watch.stored(msg.log_id, msg.batch.lsns[-1], release, self.world.now)
        self.send(src, StoreReply(msg.store_id, msg.log_id, int(status), self.id))

    def on_release(self, log_id: int, lsn: int) -> None:
        old = self.release.get(log_id, 0)
        if lsn <= old:
            return
        self.release[log_id] = lsn
        self.watch.released(log_id, lsn, self.world.now)

    # sequencer host: the production core decides, this performs

    def _append(self, src: Address, msg: Append) -> None:
        world = self.world
        actions = self.host.on_append(
            LOG,
            msg.batch,
            (src, msg.request_id),
            world.now,
            world.clock_ms(),
            owner=self.owner(),
            attributes=world.attributes,
        )
        self._execute(actions)

    def _activate(self) -> None:
        world = self.world
        nodeset = tuple(sorted(world.nodes))
        placement = Placement(nodeset, world.config.replication)
        host = self.host

        def activated(result: Any, error: BaseException | None) -> None:
            if host is not self.host:
                return  # the node restarted meanwhile
            if error is not None:
                world.note(f"node {self.id} activation failed: {error}")
                assert isinstance(error, LogstrandError)
                self._execute(host.on_activation_failed(LOG, error.status, str(error)))
                return
            epoch, meta, history = result
            world.stats["activations"] += 1
            world.note(f"node {self.id} sequencer active in epoch {epoch}")
            selector = CopysetSelector(
                meta.nodeset, meta.replication_factor, rng=random.Random(world.rng.random())
            )
            core = SequencerCore(
                LOG,
                epoch,
                selector,
                sync=True,
                recovered=epoch == 1,
                # Production's ratios, scaled down: 2 s doubling up to 10 s.
                store_timeout_s=0.3,
                store_timeout_max_s=1.5,
                retry_wait_s=0.1,
                ids=None if world.config.break_store_ids else self.ids,
            )
            if world.config.break_release:
                core.recovered = True
            core.down.update(n for n in meta.nodeset if n not in self.view)
            self.run(procs.rebroadcast_release(LOG, meta.nodeset, 0.5), lambda *_: None)
            self._execute(host.on_activated(LOG, core, world.now, world.clock_ms(), tuple(history)))

        self.run(procs.activate(LOG, placement, 0.5), activated)

    def _recover(self, core: SequencerCore, history: list[Any]) -> None:
        world = self.world
        host = self.host
        world.crash_during_recovery(self)
        self.run(
            procs.recover(
                LOG,
                core.epoch,
                history,
                lambda m: CopysetSelector(
                    m.nodeset, m.replication_factor, rng=random.Random(world.rng.random())
                ),
                self.reachable,
                world.clock_ms,
                ask_timeout_s=0.5,
                digest_timeout_s=0.5,
                store_timeout_s=0.5,
                settle_s=0.05,
                cancelled=lambda: not host.recovery_wanted(LOG, core),
                on_error=lambda error: host.on_recovery_error(LOG, core, error),
            ),
            lambda done, err: self._recovered(host, core, done, err),
        )

    def _recovered(
        self, host: SequencerHostCore, core: SequencerCore, done: Any, error: Any
    ) -> None:
        if error is not None:
            raise error
        if host is not self.host:
            return
        if done:
            self.world.note(f"node {self.id} recovered before epoch {core.epoch}")
        self._execute(host.on_recovery_done(LOG, core, bool(done)))

    def _execute(self, actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, SendStore):
                self.send(a.node_id, a.message)
            elif isinstance(a, ReplyAppend):
                src, rid = a.token
                self.send(
                    src,
                    AppendReply(
                        rid, int(a.status), a.first_lsn, a.count, a.timestamp_ms, a.redirect
                    ),
                )
            elif isinstance(a, SendRelease):
                for n in a.nodeset:
                    self.send(n, Release(a.log_id, a.lsn))
            elif isinstance(a, Activate):
                self._activate()
            elif isinstance(a, Recover):
                self._recover(a.core, list(a.history))
            elif isinstance(a, ReplySeqState):
                src, rid = a.token
                seq = self.host.sequencer(LOG)
                released = self.release.get(LOG, 0)
                if seq is not None:
                    released = max(released, seq.released_lsn)
                self.send(src, SeqState(rid, int(a.status), released_lsn=released))
            elif isinstance(a, RecoveryStalled):
                self.world.note(f"node {self.id} recovery stalled in epoch {a.epoch}: {a.error}")
                self.world.stats["stalls"] += 1
            else:
                raise AssertionError(f"unexpected action {a!r}")

    # the procedures' driver

    def run(self, proc: procs.Procedure, done: Callable[[Any, BaseException | None], None]) -> None:
        self._step(proc, self.incarnation, None, None, done)

    def _step(
        self,
        proc: procs.Procedure,
        incarnation: int,
        value: Any,
        error: BaseException | None,
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        world = self.world
        if not self.alive(incarnation):
            proc.close()  # the node died: so did everything it was doing
            return
        if self.paused_until > world.now:
            world.at(
                self.paused_until - world.now, self._step, proc, incarnation, value, error, done
            )
            return
        try:
            cmd = proc.throw(error) if error is not None else proc.send(value)
        except StopIteration as stop:
            done(stop.value, None)
            return
        except LogstrandError as exc:
            done(None, exc)
            return

        def resume(value: Any = None, error: BaseException | None = None) -> None:
            self._step(proc, incarnation, value, error, done)

        if isinstance(cmd, procs.Ask):
            self._ask(cmd, resume)
        elif isinstance(cmd, procs.Tell):
            self.send(cmd.node_id, cmd.message)
            world.at(0.0, resume)
        elif isinstance(cmd, procs.StoreCopies):
            self._store_copies(cmd, resume)
        elif isinstance(cmd, procs.EpochStoreCall):
            try:
                result = cmd.fn(world.estore)
            except LogstrandError as exc:
                world.at(world.rng.uniform(0.001, 0.01), resume, None, exc)
            else:
                world.at(world.rng.uniform(0.001, 0.01), resume, result)
        else:
            assert isinstance(cmd, procs.Sleep)
            world.at(cmd.seconds, resume)

    def _ask(self, cmd: procs.Ask, resume: Callable[..., None]) -> None:
        replies: dict[int, Any] = {}
        ids: list[int] = []
        finished = [False]
        settling = [False]

        def finish() -> None:
            if not finished[0]:
                finished[0] = True
                for rid in ids:
                    self.replies.pop(rid, None)
                resume(dict(replies))

        for node_id, msg in cmd.requests:
            rid = next(self.ids)
            ids.append(rid)

            def on_reply(reply: Any, node_id: int = node_id) -> None:
                replies.setdefault(node_id, reply)
                if len(replies) == len(cmd.requests):
                    finish()
                elif not settling[0] and cmd.enough is not None and cmd.enough(replies):
                    settling[0] = True
                    self.world.at(cmd.settle_s, finish)

            self.replies[rid] = on_reply
            self.send(node_id, attrs.evolve(msg, request_id=rid))
        self.world.at(cmd.timeout_s, finish)

    def _store_copies(self, cmd: procs.StoreCopies, resume: Callable[..., None]) -> None:
        store_id = procs.RECOVERY_STORE_BIT | next(self.ids)
        msg = attrs.evolve(cmd.message, store_id=store_id)
        statuses: dict[int, int] = {}
        finished = [False]

        def finish() -> None:
            if not finished[0]:
                finished[0] = True
                self.replies.pop(store_id, None)
                resume(dict(statuses))

        def on_reply(reply: StoreReply) -> None:
            if reply.node_id in msg.copyset:
                statuses.setdefault(reply.node_id, reply.status)
                if len(statuses) == len(msg.copyset):
                    finish()

        self.replies[store_id] = on_reply
        for n in msg.copyset:
            self.send(n, msg)
        self.world.at(cmd.timeout_s, finish)


class _RetireWhenIdle(SequencerHostCore):
    """``break_retire``: the rule before the failover-stall fix.  An idle
    sequencer retired as soon as the log's owner moved, recovered or not, and
    its recovery stopped with it."""

    def _retirable(self, core: SequencerCore, owner: Callable[[], int | None]) -> bool:
        return core.idle and (core.preempted or owner() != self.node_id)


class SimClient(Endpoint):
    """Appends with unique payloads to the node it believes runs the sequencer."""

    def __init__(self, world: World, client_id: int) -> None:
        super().__init__(world, client_id)
        self.appending = True
        self.in_flight: dict[int, tuple[list[bytes], float]] = {}
        self.acked: dict[bytes, int] = {}
        self.acked_at: dict[bytes, float] = {}
        self.attempted: set[bytes] = set()
        self.history: list[tuple[float, float, int]] = []
        self.ids = itertools.count(1)
        self.counter = itertools.count(1)
        self.view: tuple[int, ...] = tuple(world.nodes)
        self.hint: int | None = None
        self.fenced: int | None = None
        self._fencing = False

    def target(self) -> int:
        """The log's owner by rendezvous over this client's view of the
        membership (which lags), or where a node redirected it."""
        rng = self.world.rng
        if rng.random() < 0.05:
            return rng.choice(sorted(self.world.nodes))  # a stale or confused view
        if self.hint is not None:
            return self.hint
        return rendezvous_owner(LOG, dict.fromkeys(self.view, 1.0)) or 1

    def refresh(self) -> None:
        self.view = tuple(sorted(self.world.members))

    def tick(self) -> None:
        world = self.world
        if rng_hit(world, 0.2):
            # The client's view of which nodes are alive lags behind the truth.
            self.refresh()
        if self.appending and len(self.in_flight) < world.config.in_flight_max:
            count = world.rng.randint(1, 4)
            self.append([b"c%d-%d" % (self.id, next(self.counter)) for _ in range(count)])
        if self.appending or self.in_flight:
            world.at(world.rng.expovariate(1 / world.config.append_every_s), self.tick)

    def append(self, payloads: list[bytes]) -> None:
        rid = next(self.ids)
        self.attempted.update(payloads)
        n = len(payloads)
        batch = RecordBatch((0,) * n, (0,) * n, (0,) * n, (None,) * n, tuple(payloads))
        self.in_flight[rid] = (payloads, self.world.now)
        self.send(self.target(), Append(rid, LOG, batch))
        self.world.at(1.5, self._timeout, rid)

    def _timeout(self, rid: int) -> None:
        if self.in_flight.pop(rid, None) is not None:
            self.world.note(f"client {self.id} append {rid} timed out")
            self._after_failure()

    def receive(self, src: Address, msg: Any) -> None:
        if not isinstance(msg, AppendReply):
            return
        got = self.in_flight.pop(msg.request_id, None)
        if got is None:
            return  # a duplicate, or after the timeout
        payloads, sent = got
        if msg.status == Status.OK:
            assert msg.count == len(payloads)
            for i, p in enumerate(payloads):
                self.acked[p] = msg.first_lsn + i
                self.acked_at[p] = self.world.now
            self.history.append((sent, self.world.now, msg.first_lsn))
            self.world.note(f"client {self.id} acked {msg.first_lsn:#x}+{msg.count}")
            if self._fencing:
                self._fencing = False
                self.fenced = msg.first_lsn + msg.count - 1
        else:
            if msg.status == Status.REDIRECTED and msg.redirect is not None:
                self.hint = msg.redirect
            self._after_failure(redirected=msg.status == Status.REDIRECTED)

    def _after_failure(self, redirected: bool = False) -> None:
        if not redirected:
            self.hint = None
        self.refresh()
        if self._fencing:
            self.world.at(0.1, self._fence_again)

    def fence(self) -> None:
        self._fencing = True
        self.refresh()
        self.append([b"fence-%d" % self.id])

    def _fence_again(self) -> None:
        if self._fencing:
            self.append([b"fence-%d-%d" % (self.id, next(self.counter))])


def rng_hit(world: World, p: float) -> bool:
    return world.rng.random() < p


class _ReadEndpoint:
    """A node's read stream: the production ``ReadStreamCore`` over the node's
    LogsDB and its serving rule, as the node's shell drives them."""

    #: Records a node sends in one step at most (smaller than a real node's
    #: batches, so that the streams of several nodes interleave).
    STEP_RECORDS = 16

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.stream: StartStream | None = None
        self.core: ReadStreamCore | None = None
        self.release = node.release.get(LOG, 0)

    def act(self, action: Any) -> None:
        if isinstance(action, StartStream):
            self.stream = action
            self.core = ReadStreamCore(
                self.node.id,
                action.start_lsn,
                action.until_lsn,
                action.credit,
                scd=action.scd,
                known_down=action.known_down,
            )
        elif (
            isinstance(action, GrantCredit)
            and self.stream is not None
            and self.core is not None
            and self.stream.generation == action.generation
        ):
            self.core.add_credit(action.records)

    def pump(self, reader: ReaderCore, now: float) -> bool:
        s, core, db = self.stream, self.core, self.node.db
        if s is None or core is None or db is None:
            return False
        step = core.step(self.release)
        if isinstance(step, Report):
            reader.on_records(self.node.id, s.generation, step.next_lsn, 0, EMPTY_BATCH, now)
            core.sent(step.next_lsn)
            return True
        if not isinstance(step, ReadFrom):
            return False  # idle, out of credit, or finished
        batch = db.read_batch(
            LOG,
            step.start,
            step.until,
            max_records=min(step.max_records, self.STEP_RECORDS),
            skip=core.not_mine if core.scd else None,
        )
        estore = self.node.world.estore
        good = node_rules.servable(
            batch.lsns,
            batch.flags,
            batch.waves,
            self.release,
            lambda e: estore.epoch_end(LOG, e),
        )
        out = core.on_batch(batch, good)
        reader.on_records(self.node.id, s.generation, out.next_lsn, 0, out.batch, now, out.waves)
        core.sent(out.next_lsn)
        return True


def run_seed(seed: int, config: Config | None = None) -> tuple[World, dict[str, Any]]:
    """One whole run; raises Violation (with the seed and the trace's tail) on failure."""
    world = World(seed, config)
    try:
        world.run()
        summary = world.check()
    except Violation as exc:
        raise Violation(
            f"seed {seed} ({world.config}): {exc}\n"
            f"replay: python -m tests.sim --seed {seed} --trace\n"
            f"last events:\n{world.tail()}"
        ) from None
    return world, summary

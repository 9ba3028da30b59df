"""A storage node: the composition root.  It makes the parts, wires them, and
runs their tasks; the rules live in the parts.

| part | module | what it does |
|---|---|---|
| committer | ``_group_commit.py`` | owns LogsDB: group commit, release pointers, answers |
| server | ``_server.py`` | accept, handshake, the dispatch table |
| peers | ``_peers.py`` | STOREs/RELEASEs/requests to other nodes, their replies |
| sequencer host | ``_sequencers.py`` (core ``sequencer/_host.py``) | this node's sequencers |
| procedures | ``_procedures.py`` | drives sealing and recovery |
| read streams | ``_reads.py`` (core: ``_read_core.py``) | pushes copies to readers |
| drops | ``_drops.py`` | this node's part of compaction |
| release watch | ``_release_watch.py`` | notices releases that are overdue |
| rebuilder | ``_rebuild.py`` (core ``rebuilding/``) | this node's part of rebuilding |
| upkeep | ``_upkeep.py`` | free space (``--min-free``), trims missed, retention |
| health | ``_health.py`` (core ``_health_core.py``) | its clock, whether it takes sequencers |
| gossip | ``_gossip.py`` (core ``_detector.py``) | the failure detector: who is dead |

Extensions run beside them (the cleaner, from ``logstrand node``): each gets the
node's ``NodeServices`` and registers handlers for the messages it answers.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..epochstore import open_epoch_store
from ..errors import NotFoundError, Status
from ..rpc import ClusterView
from ..security import Credentials, client_context, server_context
from ..wire import (
    GetClusterState,
    GetNodeStatus,
    GetTails,
    Gossip,
    LogInfo,
    LogInfoReply,
    NodeStatus,
    TailsReply,
)
from ._detector import FailureDetector
from ._donor import Donor
from ._drops import Drops
from ._gc import watch_collections
from ._gossip import Gossiper
from ._group_commit import Committer
from ._guard import Guard
from ._handlers import register_handlers
from ._health import Health, mark_handed_off, take_handed_off
from ._health_core import HealthCore, HealthOptions
from ._metrics import NodeMetrics
from ._options import NodeOptions
from ._peers import Peers
from ._procedures import ProcedureRunner
from ._reads import ReadStreams
from ._rebuild import Rebuilder, read_marker
from ._release_watch import ReleaseWatch
from ._sequencers import SequencerHost
from ._server import Server, raise_fd_limit
from ._upkeep import Upkeep

if TYPE_CHECKING:
    import ssl
    from collections.abc import Awaitable, Callable

    from ..epochstore import NodeConfig
    from ..logsdb import LogsDBOptions
    from ..net import Connection
    from ..sequencer._host_queries import Sequenced

_log = logging.getLogger("logstrand.node")
#: An idle node's ticker wakes this often (20 times a second when busy).
IDLE_TICK_S = 0.5


class NodeExtension(Protocol):
    """Runs beside the node's parts (the cleaner): it gets the node, registers
    handlers for the messages it answers, and says when it has started.  One
    that serves an address has ``configure(cfg) -> cfg`` too (``_advertise``)."""

    async def run(self, node: Node, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


class Node:
    """One storage node.  ``await node.run()`` serves until cancelled."""

    def __init__(
        self,
        url: str,
        node_id: int,
        *,
        data_dir: str | None = None,
        options: NodeOptions | None = None,
        logsdb_options: LogsDBOptions | None = None,
        extensions: tuple[NodeExtension, ...] = (),
        listen: tuple[str, int] | None = None,
        advertise: str | None = None,
        metrics: tuple[str, int] | None = None,
        kafka: str | None = None,
    ) -> None:
        self.url = url
        #: The Kafka front's address (``:PORT``: on the configured host), or None.
        self.kafka = kafka
        #: Where to listen (None: the address in the cluster configuration),
        #: the address to put there at start, and where /metrics is served.
        self.listen = listen
        self.advertise = advertise
        self.metrics_at = metrics
        self.node_id = node_id
        self.data_dir = data_dir
        self.options = options or NodeOptions()
        self.logsdb_options = logsdb_options
        self.extensions = extensions
        self.metrics = NodeMetrics(node_id)
        tls = self.options.tls
        #: How this node proves itself to other nodes (None: no TLS).
        self.credentials: Credentials | None = None
        self.server_ssl: ssl.SSLContext | None = None
        if tls is not None:
            self.server_ssl = server_context(tls)
            self.credentials = Credentials(client_context(tls.ca, tls.cert, tls.key))
        self.release_watch = ReleaseWatch()
        opts = self.options
        #: This node's clock and what it says of itself (``_health_core``).
        self.health_core = HealthCore(
            node_id,
            HealthOptions(opts.clock_skew_max_ms, opts.sequencer_hold_down_s),
            lambda: int(time.time() * 1000),
        )
        self._started = time.monotonic()
        self._closing: list[Callable[[], Awaitable[None]]] = []
        self._data_dir = ""
        self.view: ClusterView
        self.server: Server
        self.sequencers: SequencerHost

    def sequenced_logs(self) -> Sequenced:
        return self.sequencers.core.sequenced

    def clock_ms(self) -> int:
        """This node's clock: its wall clock corrected to the cluster's."""
        return self.health_core.clock.now_ms()

    def register(
        self, message_type: type, handler: Callable[[Connection, Any], Awaitable[None]]
    ) -> None:
        self.server.register(message_type, handler)

    # -- lifecycle ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        store = await trio.to_thread.run_sync(open_epoch_store, self.url)
        self.view = view = ClusterView(store)
        self.guard = Guard(self.node_id, view, self.metrics, secure=self.options.tls is not None)
        raise_fd_limit()
        unwatch = watch_collections(self.metrics)
        try:
            await view.refresh()
            cfg = view.nodes.get(self.node_id)
            if cfg is None:
                raise NotFoundError(f"node {self.node_id} is not in the cluster configuration")
            cfg = await self._advertise(cfg)
            data_dir = self.data_dir or cfg.data_dir
            if not data_dir:
                raise NotFoundError(f"node {self.node_id} has no data directory configured")
            async with trio.open_nursery() as nursery:
                host, port = self.listen or (cfg.host, cfg.port)
                metrics_at = self.metrics_at
                if metrics_at is None and cfg.metrics_port:
                    metrics_at = ("127.0.0.1", cfg.metrics_port)
                await self._serve(nursery, data_dir, port, host, metrics_at)
                _log.info(
                    "node %d serving on %s (listening on %s:%d)",
                    self.node_id,
                    cfg.address,
                    host,
                    port,
                )
                task_status.started(cfg.address)
        finally:
            # Every task has stopped: close what they used, the LogsDB last
            # but for the epoch store (persisting the release pointers).
            with trio.CancelScope(shield=True):
                for close in reversed(self._closing):
                    await close()
                await view.astore.aclose()
            unwatch()

    async def hand_off(self) -> None:
        """Told to stop: end the epochs of this node's sequencers
        (``SequencerHost.hand_off``, at most ``--handoff-timeout``), and
        mark the data directory so that the next start skips the hold-down.
        Call it before cancelling ``run``."""
        timeout_s = self.options.sequencer_handoff_s
        sequencers: SequencerHost | None = getattr(self, "sequencers", None)
        health: Health | None = getattr(self, "health", None)
        if not timeout_s or sequencers is None or health is None or not self._data_dir:
            return  # not serving yet, or told to stop as after a crash
        t0 = time.monotonic()
        # Routing goes around this node from now on (its own view at once,
        # its peers' with the next gossip, clients' with the membership):
        # appends to its logs go to their next owners, not to a closed door.
        health.stopping()
        self.gossiper.said_changed()
        ended, count = await sequencers.hand_off(timeout_s)
        _log.info(
            "node %d: ended %d of %d sequencers' epochs in %.1f s",
            self.node_id,
            ended,
            count,
            time.monotonic() - t0,
        )
        await trio.to_thread.run_sync(mark_handed_off, self._data_dir)

    async def _advertise(self, cfg: NodeConfig) -> NodeConfig:
        """Put ``--advertise`` (and the port of ``--metrics``, the Kafka
        front's address, the console's port, or their absence) in the cluster
        configuration when they differ from it.  An extension with a
        ``configure(cfg) -> cfg`` says what it serves."""
        metrics_port = self.metrics_at[1] if self.metrics_at else cfg.metrics_port
        address = self.advertise or cfg.address
        kafka = self.kafka
        if kafka is not None and kafka.startswith(":"):
            kafka = address.rsplit(":", 1)[0] + kafka
        new = attrs.evolve(
            cfg, address=address, metrics_port=metrics_port, kafka=kafka, http_port=None
        )
        for extension in self.extensions:
            configure = getattr(extension, "configure", None)
            new = new if configure is None else configure(new)
        if new == cfg:
            return cfg
        await self.view.astore.run(lambda s: s.update_node(new))
        # A new address is worth a warning; ports recorded at start are not.
        level = logging.WARNING if address != cfg.address else logging.INFO
        _log.log(level, "node %d: configuration now says %s (was %s)", self.node_id, new, cfg)
        await self.view.refresh()
        return new

    async def _serve(
        self,
        nursery: trio.Nursery,
        data_dir: str,
        port: int,
        host: str,
        metrics_at: tuple[str, int] | None,
    ) -> None:
        """Make the parts and start their tasks (they stop with ``nursery``)."""
        self._data_dir = data_dir
        marker = await self._open_store(data_dir)
        drops = self._make_parts(nursery, data_dir)
        await self.rebuilder.on_start(marker, data_dir)
        register_handlers(self, self.committer, self.reads, drops, nursery)
        listeners = await trio.open_tcp_listeners(port, host=host)
        health, gossiper = await self._join(self.peers)
        if metrics_at is not None:
            server = self.metrics.serve(metrics_at[1], metrics_at[0])
            self._closing.append(_sync(server.shutdown))
        view = self.view
        await nursery.start(view.run)
        if self.guard.secure:
            await self.guard.refresh_security(force=True)
            nursery.start_soon(self._supervised, self.guard.run_security)
        view.on_membership(self.sequencers.on_membership)
        view.on_authority(lambda a: self.sequencers.core.on_no_writes(a.no_writes))
        self.sequencers.core.on_no_writes(view.authority.no_writes)
        committer, upkeep = self.committer, self.upkeep
        for task in (
            committer.run,
            committer.persist_releases,
            self.peers.run,
            self.sequencers.release_flusher,
            self._ticker,
            upkeep.maintain,
            upkeep.watch_space,
            self.rebuilder.run,
            health.run,
            gossiper.run,
        ):
            nursery.start_soon(self._supervised, task)
        for extension in self.extensions:
            await nursery.start(extension.run, self)
        await nursery.start(self.server.serve, listeners)

    async def _open_store(self, data_dir: str) -> str | None:
        """Open the node's LogsDB behind its group commit; the data
        directory's marker (what rebuilding knows it by)."""
        opts, watch = self.options, self.release_watch

        def released(log_id: int, lsn: int) -> None:
            reads = getattr(self, "reads", None)  # made after the store: see ``_make_parts``
            if reads is not None:
                reads.released(log_id)
            watch.released(log_id, lsn, trio.current_time())

        def stored(log_id: int, last_lsn: int, release_lsn: int) -> None:
            watch.stored(log_id, last_lsn, release_lsn, trio.current_time())

        committer = self.committer = Committer(
            node_id=self.node_id,
            metrics=self.metrics,
            queue_max=opts.store_queue_max,
            records_max=opts.group_commit_records_max,
            bytes_max=opts.group_commit_bytes_max,
            release_persist_s=opts.release_persist_s,
            on_released=released,
            on_stored=stored,
            clock=self.health_core.clock,
        )
        view = self.view
        marker = await trio.to_thread.run_sync(read_marker, data_dir, view.cluster, self.node_id)
        committer.open(data_dir, self.logsdb_options)
        self.guard.release_of = committer.release_of
        self._closing.append(_sync(committer.close))  # on this thread: the LogsDB's
        now = trio.current_time()
        for log, release in committer.release.items():
            watch.stored(log, committer.last_lsn(log), release, now)
        return marker

    def _make_parts(self, nursery: trio.Nursery, data_dir: str) -> Drops:
        """The parts over the store: peers, read streams, rebuilding,
        sequencers, the server, upkeep (and compaction's drops, returned)."""
        view, opts, metrics, committer = self.view, self.options, self.metrics, self.committer
        peers = self.peers = Peers(
            self.node_id, view, nursery, committer, self._on_store_reply, self.credentials
        )
        reads = self.reads = ReadStreams(
            self.node_id,
            committer,
            view.astore,
            metrics,
            nursery,
            streams_per_connection=opts.read_streams_per_connection,
            credit_max=opts.read_credit_max,
        )
        donor = Donor(self.node_id, view, committer, peers, metrics, opts, reads.servable)
        self.rebuilder = Rebuilder(self.node_id, view, metrics, opts, donor)
        procedures = ProcedureRunner(self.node_id, view, peers, committer.answer, metrics)
        self.sequencers = SequencerHost(
            self.node_id,
            opts,
            view,
            peers,
            procedures,
            committer.release_of,
            committer.on_release,
            metrics,
            nursery,
            self.clock_ms,
        )
        self.server = Server(
            self.node_id,
            view.cluster,
            guard=self.guard,
            options=opts,
            metrics=metrics,
            ssl_context=self.server_ssl,
            on_closed=reads.connection_closed,
            busy=reads.busy,
        )
        self.upkeep = Upkeep(self.node_id, opts, committer, metrics, view, data_dir)
        return Drops(self.node_id, committer, view, metrics)

    async def _join(self, peers: Peers) -> tuple[Health, Gossiper]:
        """Make the node's health and failure detector, and join the membership."""
        view, opts, metrics = self.view, self.options, self.metrics
        health = self.health = Health(self.health_core, view, metrics)
        view.on_members(health.on_members)
        gossiper = self.gossiper = Gossiper(
            FailureDetector(self.node_id, dead_after_s=opts.dead_after_s),
            view,
            peers,
            health,
            metrics,
            opts.gossip_s,
        )
        view.on_members(gossiper.on_members)
        self.server.register(Gossip, gossiper.handle_gossip)
        self.server.register(GetClusterState, gossiper.handle_cluster_state)
        handed_off = await trio.to_thread.run_sync(take_handed_off, self._data_dir)
        if handed_off:
            _log.info("node %d: it stopped handing off: no hold-down", self.node_id)
        session = await health.register(handed_off=handed_off)
        self._closing.append(_in_thread(session.close))
        return health, gossiper

    async def _on_store_reply(self, reply: Any) -> None:
        if not self.rebuilder.on_store_reply(reply):
            await self.sequencers.on_store_reply(reply)

    # -- status and background work -----------------------------------------------

    def status(self, msg: GetNodeStatus) -> NodeStatus:
        return NodeStatus(
            msg.request_id,
            int(Status.OK),
            self.node_id,
            *self.committer.counts(),  # partitions, disk bytes, logs
            tuple(self.sequencers.sequencers),
            int(time.monotonic() - self._started),
            self.reads.corrupt_copies,
            self.upkeep.free_bytes,
            int(self.committer.space_low or self.committer.broken),
            *self.committer.written(),
        )

    def log_info(self, msg: LogInfo) -> LogInfoReply:
        reply = self.committer.answer(msg)
        assert isinstance(reply, LogInfoReply)
        return attrs.evolve(reply, corrupt_copies=self.reads.corrupt_in(msg.log_id))

    def tails(self, msg: GetTails) -> TailsReply:
        """Many logs' tails as this node knows them (``TailsReply``)."""
        committer = self.committer
        db = committer.db
        acked_tail = self.sequencers.acked_tail
        out: list[int] = []
        for log in msg.log_ids:
            acked = acked_tail(log)
            has = 0 if acked is None else 1
            out += (has, acked or 0, committer.release_of(log), db.last_lsn(log))
        return TailsReply(msg.request_id, int(Status.OK), tuple(out))

    async def _supervised(self, task: Callable[[], Awaitable[None]]) -> None:
        """Run a background task for the node's life: a failure is logged and
        counted, and the task starts again after a pause (1 s, doubling to 30 s);
        it never takes the node down."""
        name = getattr(task, "__name__", repr(task))
        pause = 1.0
        while True:
            started = trio.current_time()
            try:
                await task()
                return
            except Exception:
                _log.exception(
                    "node %d: %s failed; it runs again in %.0f s", self.node_id, name, pause
                )
                self.metrics.background_failures.labels(name).inc()
            if trio.current_time() - started > 60:
                pause = 1.0  # it ran a good while: a new failure, not the same one
            await trio.sleep(pause)
            pause = min(30.0, pause * 2)

    async def _ticker(self) -> None:
        """Ticks (``sequencer._host`` rule 7), release questions and gauges:
        every ``tick_s`` while the host has logs to look at, else at the first
        deadline or within IDLE_TICK_S; ``tick_s`` after the host wakes it."""
        next_gauges, watch, host = 0.0, self.release_watch, self.sequencers.core
        woken = trio.Event()
        host.wake = lambda: woken.set()  # the loop's current event: rebound below
        while True:
            now, tick_s = trio.current_time(), self.options.tick_s
            then = min(host.next_tick_at(), watch.next_due(), next_gauges, now + IDLE_TICK_S)
            if then - now > tick_s:
                woken = trio.Event()
                with trio.move_on_after(then - now - tick_s):
                    await woken.wait()
            await trio.sleep(tick_s)
            await self.sequencers.tick()
            now = trio.current_time()
            for log_id in watch.due(now):
                self.sequencers.nursery.start_soon(self.sequencers.ask_for_release, log_id, watch)
            if now >= next_gauges:
                next_gauges = now + 1.0
                self.sequencers.gauges()
                for pool, budget in (
                    ("clients", self.server.client_pool),
                    ("nodes", self.server.peer_pool),
                ):
                    self.metrics.receive_held.labels(pool).set(budget.used)
                    self.metrics.receive_held_peak.labels(pool).set(budget.peak)
                self.metrics.releases_overdue.set(watch.overdue(now))


def _sync(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        fn()

    return call


def _in_thread(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        await trio.to_thread.run_sync(fn)

    return call

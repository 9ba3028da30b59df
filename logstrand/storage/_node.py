"""A storage node: one trio process holding a LogsDB, serving the wire protocol,
hosting sequencers.

Theory of operation
-------------------
Every accepted connection gets a receive task (messages handled in order)
and a writer task.  STOREs from all connections, and from this node's own
sequencers, go into one bounded queue; the *committer* takes everything
waiting (up to a size limit), writes it to LogsDB in one RocksDB write in the
storage thread, and answers each STORE.  That is the group commit: under load
one fsync (for ``fsync`` logs) covers hundreds of STOREs.

Sequencers send STOREs to other nodes over one outgoing connection per peer;
the replies come back on it and go, with local replies, through one channel
to the sequencer host.  LogsDB is only ever touched from the storage thread
(a capacity limiter of one).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from typing import Any

import attrs
import trio

from ..epochstore import EpochEnd, open_epoch_store
from ..errors import LogstrandError, NotFoundError, Status, TransientError
from ..logsdb import LogsDB, LogsDBOptions, PutBatch
from ..net import Connection, connect, serve_connection
from ..view import ClusterView
from ..wire import (
    Append,
    CleanPoint,
    Compact,
    Digest,
    DropCopies,
    FindTime,
    FindTimeReply,
    GetDigest,
    GetLogDirectory,
    GetNodeStatus,
    GetSeqState,
    LogInfo,
    LogInfoReply,
    NodeStatus,
    Ping,
    Pong,
    ReadCredit,
    Release,
    Seal,
    SealReply,
    SeqState,
    StartRead,
    StopRead,
    Store,
    StoreReply,
    Trim,
    TrimReply,
)
from . import _core
from ._cleaner import Cleaner
from ._metrics import NodeMetrics
from ._procedures import ProcedureRunner
from ._reads import ReadStreams
from ._release_watch import ReleaseWatch
from ._sequencers import SequencerHost

_log = logging.getLogger("logstrand.node")


@attrs.frozen
class NodeOptions:
    payload_bytes_max: int = 1024 * 1024
    #: One group commit takes at most this much from the store queue.
    group_commit_records_max: int = 50_000
    group_commit_bytes_max: int = 32 * 1024 * 1024
    store_queue_max: int = 4096
    sequencer_appenders_max: int = 1024
    store_timeout_s: float = 2.0
    #: How long a new sequencer waits for an f-majority to seal older epochs.
    seal_timeout_s: float = 3.0
    tick_s: float = 0.05
    release_persist_s: float = 1.0
    #: A new sequencer waits this long before it recovers the earlier epochs
    #: (it takes appends meanwhile, and releases them after).  Tests use it to
    #: kill a sequencer in the middle of its recovery.
    recovery_grace_s: float = 0.0
    #: A sequencer whose recovery of the earlier epochs has not finished this
    #: long after activation is *stalled*: it logs an error, counts it, shows
    #: it in ``logstrand info``, and refuses appends (NOTREADY) until done.
    recovery_stall_s: float = 10.0
    #: How often the node applies trims it missed, retention, and drops
    #: partitions whose records are all trimmed.
    maintenance_s: float = 10.0
    #: How often the cleaner looks for a compacted log to clean (0: never by
    #: itself; ``client.compact`` still runs a pass).
    compaction_interval_s: float = 15.0
    #: The offset map's memory (24 bytes a key, filled to 90%).
    compaction_map_bytes: int = 64 * 1024 * 1024
    #: Bytes a second the cleaner reads and each node scans (0: no limit).
    compaction_io_bytes_s: int = 0
    #: How long the cleaner waits for the nodes to drop their copies.
    compaction_drop_timeout_s: float = 600.0


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
    ) -> None:
        self.url = url
        self.node_id = node_id
        self.data_dir = data_dir
        self.options = options or NodeOptions()
        self.logsdb_options = logsdb_options
        self.metrics = NodeMetrics(node_id)
        self.sequencers = SequencerHost(self)
        self.reads = ReadStreams(self)
        self.procedures = ProcedureRunner(self)
        self.cleaner = Cleaner(self)
        self.release: dict[int, int] = {}
        self.release_watch = ReleaseWatch()
        self._started = time.monotonic()
        # How recoveries ended past epochs, from the epoch store, per (log, epoch).
        self.epoch_ends: dict[tuple[int, int], EpochEnd | None] = {}
        self._release_dirty: set[int] = set()
        self._peers: dict[int, Connection] = {}
        self._request_ids = itertools.count(1)
        self._peer_waiters: dict[int, trio.Event] = {}
        self._peer_replies: dict[int, Any] = {}
        self._peer_locks: dict[int, trio.Lock] = {}
        self._db_limiter = trio.CapacityLimiter(1)
        self._store_in, self._store_out = trio.open_memory_channel[tuple[Store, Any]](
            self.options.store_queue_max
        )
        # Replies to STOREs sent by this node's sequencers.  Never full: the
        # sequencers' windows bound the STOREs in flight far below this.
        self._replies_in, self._replies_out = trio.open_memory_channel[StoreReply](2**20)
        self.view: ClusterView
        self.db: LogsDB
        self.nursery: trio.Nursery
        self.cluster = ""

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    # -- lifecycle ----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        store = await trio.to_thread.run_sync(open_epoch_store, self.url)
        try:
            self.cluster = store.cluster
            self.view = ClusterView(store)
            await self.view.refresh()
            cfg = self.view.nodes.get(self.node_id)
            if cfg is None:
                raise NotFoundError(f"node {self.node_id} is not in the cluster configuration")
            data_dir = self.data_dir or cfg.data_dir
            if not data_dir:
                raise NotFoundError(f"node {self.node_id} has no data directory configured")
            self.db = await trio.to_thread.run_sync(
                functools.partial(LogsDB.open, data_dir, self.logsdb_options)
            )
            self.release = {log: self.db.release_pointer(log) for log in self.db.logs()}
            now = trio.current_time()
            for log, release in self.release.items():
                self.release_watch.stored(log, self.db.last_lsn(log), release, now)
            try:
                listeners = await trio.open_tcp_listeners(cfg.port, host=cfg.host)
                session = await trio.to_thread.run_sync(store.register_member, self.node_id)
                metrics_server = None
                if cfg.metrics_port:
                    metrics_server = self.metrics.serve(cfg.metrics_port)
                try:
                    async with trio.open_nursery() as nursery:
                        self.nursery = nursery
                        await nursery.start(self.view.run)
                        self.view.on_membership(self.sequencers.on_membership)
                        nursery.start_soon(self._committer)
                        nursery.start_soon(self._reply_pump)
                        nursery.start_soon(self._ticker)
                        nursery.start_soon(self.sequencers.release_flusher)
                        nursery.start_soon(self._release_persister)
                        nursery.start_soon(self._maintenance)
                        nursery.start_soon(self.cleaner.run)
                        nursery.start_soon(
                            functools.partial(
                                trio.serve_listeners,
                                self._handle_stream,
                                listeners,
                                handler_nursery=nursery,
                            )
                        )
                        _log.info("node %d serving on %s", self.node_id, cfg.address)
                        task_status.started(cfg.address)
                finally:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(session.close)
                        if metrics_server is not None:
                            metrics_server.shutdown()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._close_db, limiter=self._db_limiter)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(store.close)

    def _close_db(self) -> None:
        self._persist_releases_sync(dict(self.release), sync=True)
        self.db.close()

    # -- serving ------------------------------------------------------------

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        conn = await serve_connection(
            stream, cluster=self.cluster, node_id=self.node_id, on_open=_noop
        )
        if conn is None:
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.writer)
                await conn.receive_messages(functools.partial(self._dispatch, conn))
                nursery.cancel_scope.cancel()
            self.reads.connection_closed(conn)
        except Exception:
            self.reads.connection_closed(conn)
            # Whatever one connection's traffic provokes ends that connection,
            # never the node.
            _log.exception("node %d: connection %s failed", self.node_id, conn.peer)
            await conn.aclose()

    async def _dispatch(self, conn: Connection, msg: Any) -> None:
        if isinstance(msg, Store):
            await self._store_in.send((msg, conn.send))
        elif isinstance(msg, Append):
            await self.sequencers.handle_append(conn, msg)
        elif isinstance(msg, Release):
            self.on_release(msg)
        elif isinstance(msg, StartRead):
            self.reads.start(conn, msg)
        elif isinstance(msg, ReadCredit):
            self.reads.credit(conn, msg)
        elif isinstance(msg, StopRead):
            self.reads.stop(conn, msg)
        elif isinstance(msg, LogInfo | Seal | GetDigest):
            await conn.send(self.answer(msg))
        elif isinstance(msg, GetSeqState):
            await self.sequencers.handle_get_seq_state(conn, msg)
        elif isinstance(msg, FindTime):
            lsn = self.db.find_time(msg.log_id, msg.timestamp_ms)
            found = lsn if lsn <= self.db.last_lsn(msg.log_id) else 0
            await conn.send(FindTimeReply(msg.request_id, int(Status.OK), found))
        elif isinstance(msg, Trim):
            await conn.send(self._trim(msg))
        elif isinstance(msg, GetNodeStatus):
            await conn.send(self._status(msg))
        elif isinstance(msg, GetLogDirectory):
            await conn.send(_core.log_directory(self.db, msg))
        elif isinstance(msg, DropCopies):
            self.nursery.start_soon(self.cleaner.handle_drop, conn, msg)
        elif isinstance(msg, CleanPoint):
            self.cleaner.on_clean_point(msg)
        elif isinstance(msg, Compact):
            self.nursery.start_soon(self.cleaner.handle_compact, conn, msg)
        elif isinstance(msg, Ping):
            await conn.send(Pong(msg.request_id))
        # Anything else has no meaning on this side of a connection: ignore it.

    # -- storing ------------------------------------------------------------

    async def _committer(self) -> None:
        """Group commit: everything waiting goes into one RocksDB write."""
        opts = self.options
        async for first in self._store_out:
            items = [first]
            records = len(first[0].batch)
            size = first[0].batch.payload_bytes
            while records < opts.group_commit_records_max and size < opts.group_commit_bytes_max:
                try:
                    item = self._store_out.receive_nowait()
                except trio.WouldBlock:
                    break
                items.append(item)
                records += len(item[0].batch)
                size += item[0].batch.payload_bytes
            await self._commit(items)

    async def _commit(self, items: list[tuple[Store, Any]]) -> None:
        db = self.db
        puts: list[PutBatch] = []
        accepted: list[tuple[Store, Any]] = []
        refused: list[tuple[Store, Any]] = []
        sync = False
        for msg, sink in items:
            if not _core.admit_store(db, msg):
                # Sealed: only a recovery of a newer sequencer may write.
                refused.append((msg, sink))
                continue
            if msg.released_lsn:
                # The sequencer's release pointer rides along with its STOREs.
                self.on_release(Release(msg.log_id, msg.released_lsn))
            puts.append(PutBatch(msg.log_id, msg.batch, msg.copyset, msg.wave))
            accepted.append((msg, sink))
            sync = sync or msg.sync
        status = Status.OK
        if puts:
            t0 = time.perf_counter()
            try:
                # In the event loop's own thread, on purpose: rocksdict holds the
                # GIL for the whole write, so a worker thread would not keep the
                # loop running anyway, and the hand-off to it and back costs more
                # than a small write (and up to a GIL switch interval, 5 ms, when
                # the loop is busy).  The group commit size bounds the pause.
                # Release pointers ride along with the data (atomic, no extra write).
                dirty = {log: self.release[log] for log in self._release_dirty}
                self._release_dirty.clear()
                db.write(puts, sync=sync, releases=dirty)
            except LogstrandError as exc:
                _log.error("node %d: store failed: %s", self.node_id, exc)
                status = exc.status
            except Exception:
                _log.exception("node %d: store failed", self.node_id)
                status = Status.FAILED
            if status == Status.OK:
                now = trio.current_time()
                for p in puts:
                    if p.records.lsns:
                        release = self.release.get(p.log_id, 0)
                        self.release_watch.stored(p.log_id, p.records.lsns[-1], release, now)
            m = self.metrics
            m.group_commit_seconds.observe(time.perf_counter() - t0)
            m.group_commits.inc()
            m.stores.inc(len(puts))
            m.store_records.inc(sum(len(p.records) for p in puts))
            m.store_bytes.inc(sum(p.records.payload_bytes for p in puts))
        for batch, result in ((accepted, status), (refused, Status.PREEMPTED)):
            for msg, sink in batch:
                # If the sequencer's connection is gone, it will retry elsewhere.
                with contextlib.suppress(LogstrandError):
                    await sink(StoreReply(msg.store_id, msg.log_id, int(result), self.node_id))

    async def _local_sink(self, reply: StoreReply) -> None:
        await self._replies_in.send(reply)

    async def _reply_pump(self) -> None:
        async for reply in self._replies_out:
            await self.sequencers.on_store_reply(reply)

    async def send_store(self, node_id: int, msg: Store) -> bool:
        """Send a STORE to a node (this one included).  False if it cannot be sent."""
        if node_id == self.node_id:
            await self._store_in.send((msg, self._local_sink))
            return True
        conn = await self._peer(node_id)
        if conn is None:
            return False
        try:
            await conn.send(msg)
        except TransientError:
            return False
        return True

    async def send_release(self, node_id: int, msg: Release) -> None:
        if node_id == self.node_id:
            self.on_release(msg)
            return
        conn = await self._peer(node_id)
        if conn is not None:
            # Best effort: a lost RELEASE is overtaken by the next one.
            conn.send_nowait(msg)

    async def _peer(self, node_id: int) -> Connection | None:
        conn = self._peers.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        lock = self._peer_locks.setdefault(node_id, trio.Lock())
        async with lock:
            conn = self._peers.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            cfg = self.view.nodes.get(node_id)
            if cfg is None:
                return None
            try:
                conn = await connect(cfg.host, cfg.port, cluster=self.cluster, node_id=self.node_id)
            except TransientError:
                self.view.suspect(node_id)
                return None
            self.view.trust(node_id)
            self._peers[node_id] = conn
            self.nursery.start_soon(conn.writer)
            self.nursery.start_soon(self._peer_reader, conn)
            return conn

    async def _peer_reader(self, conn: Connection) -> None:
        async def handle(msg: Any) -> None:
            if isinstance(msg, StoreReply):
                await self._replies_in.send(msg)
            elif isinstance(msg, LogInfoReply | SealReply | Digest | SeqState):
                waiter = self._peer_waiters.get(msg.request_id)
                if waiter is not None:
                    self._peer_replies[msg.request_id] = msg
                    waiter.set()

        await conn.receive_messages(handle)

    # -- release and timers -------------------------------------------------

    def on_release(self, msg: Release) -> None:
        if msg.lsn > self.release.get(msg.log_id, 0):
            self.release[msg.log_id] = msg.lsn
            self._release_dirty.add(msg.log_id)
            self.reads.released(msg.log_id)
            self.release_watch.released(msg.log_id, msg.lsn, trio.current_time())

    async def _ask_for_release(self, log_id: int) -> None:
        """Copies of the log stay unreleased here: have its owner run a
        sequencer, and take what it has released (see ``ReleaseWatch``)."""
        owner = self.view.sequencer_node(log_id)
        if owner is None:
            return
        if owner == self.node_id:
            await self.sequencers.poke(log_id)
            return
        reply = await self.ask_peer(owner, lambda rid: GetSeqState(rid, log_id))
        if not isinstance(reply, SeqState):
            return
        if reply.status == Status.OK:
            self.on_release(Release(log_id, reply.released_lsn))
        elif reply.status == Status.NOTFOUND:
            self.release_watch.forget(log_id)

    def release_of(self, log_id: int) -> int:
        return self.release.get(log_id, 0)

    async def ask_peer(self, node_id: int, make: Any, timeout_s: float = 2.0) -> Any:
        """Send a request to a peer and wait for the reply with its request id."""
        conn = await self._peer(node_id)
        if conn is None:
            return None
        rid = next(self._request_ids)
        waiter = self._peer_waiters[rid] = trio.Event()
        try:
            with trio.move_on_after(timeout_s):
                await conn.send(make(rid))
                await waiter.wait()
        except TransientError:
            return None
        finally:
            self._peer_waiters.pop(rid, None)
        return self._peer_replies.pop(rid, None)

    def answer(self, msg: LogInfo | Seal | GetDigest) -> LogInfoReply | SealReply | Digest:
        """This node's answer to a recovery's question (from a peer or itself)."""
        return _core.answer(self.db, self.node_id, self.release_of(msg.log_id), msg)

    def _log_info(self, msg: LogInfo) -> LogInfoReply:
        return _core.log_info(self.db, self.release_of(msg.log_id), msg)

    def _persist_releases_sync(self, releases: dict[int, int], sync: bool = False) -> None:
        if releases:
            self.db.set_releases(releases, sync=sync)

    async def _release_persister(self) -> None:
        while True:
            await trio.sleep(self.options.release_persist_s)
            if self._release_dirty:
                dirty = {log: self.release[log] for log in self._release_dirty}
                self._release_dirty.clear()
                await trio.to_thread.run_sync(
                    self._persist_releases_sync, dirty, limiter=self._db_limiter
                )

    # -- trim, retention, status ---------------------------------------------

    def _trim(self, msg: Trim) -> TrimReply:
        # In the event loop's thread, like the group commit: LogsDB's partition
        # bookkeeping is not shared across threads.
        try:
            point = self.db.trim(msg.log_id, msg.lsn)
        except LogstrandError as exc:
            return TrimReply(msg.request_id, int(exc.status), self.node_id)
        self.metrics.trims.inc()
        return TrimReply(msg.request_id, int(Status.OK), self.node_id, point)

    def _status(self, msg: GetNodeStatus) -> NodeStatus:
        db = self.db
        return NodeStatus(
            msg.request_id,
            int(Status.OK),
            self.node_id,
            len(db.partitions()),
            db.disk_bytes(),
            len(db.logs()),
            tuple(self.sequencers.sequencers),
            int(time.monotonic() - self._started),
        )

    async def _maintenance(self) -> None:
        """Trims missed while down, retention, partition drops, space gauges."""
        while True:
            try:
                await self._maintain()
            except LogstrandError as exc:
                _log.warning("node %d: maintenance: %s", self.node_id, exc)
            await trio.sleep(self.options.maintenance_s)

    async def _maintain(self) -> None:
        db = self.db
        view = self.view
        logs = db.logs()
        # Trims decided while this node was down (the epoch store has them all).
        for log in logs:
            point = await view.astore.call(view.store.trim_point, log)
            if point > db.trim_point(log):
                db.trim(log, point)
                self.metrics.trims.inc()
        # Retention: whole partitions' worth of old records, per log.
        retention = {}
        for log in logs:
            attributes = view.log_attributes(log)
            if attributes is not None and attributes.retention_ms is not None:
                retention[log] = attributes.retention_ms
        if retention:
            moved = db.apply_retention(retention, now_ms=self.now_ms())
            if moved:
                _log.info("node %d: retention trimmed logs %s", self.node_id, sorted(moved))
        dropped = db.drop_partitions()
        if dropped:
            _log.info("node %d: dropped partitions %s", self.node_id, dropped)
            self.metrics.partitions_dropped.inc(len(dropped))
        self.metrics.partitions.set(len(db.partitions()))
        self.metrics.disk_bytes.set(db.disk_bytes())

    async def _ticker(self) -> None:
        next_gauges = 0.0
        while True:
            await trio.sleep(self.options.tick_s)
            await self.sequencers.tick()
            now = trio.current_time()
            for log_id in self.release_watch.due(now):
                self.nursery.start_soon(self._ask_for_release, log_id)
            if now >= next_gauges:
                next_gauges = now + 1.0
                self.sequencers.gauges()
                self.metrics.releases_overdue.set(len(self.release_watch.overdue(now)))


async def _noop(conn: Connection) -> None:
    return None

"""The committer: the one owner of a node's LogsDB.

Rules
-----
1. Every call into LogsDB is made here, on the event loop's thread (LogsDB
   asserts it).  rocksdict holds the GIL for a write or a read, so a worker
   thread would not keep the loop running anyway, and the hand-off costs more
   than a small write.  The one exception is reclaiming space after
   compaction: RocksDB's flush and range compaction release the GIL and touch
   no state of LogsDB, so they run in a worker thread (``reclaim``).
2. Group commit: STOREs from all connections and from this node's own
   sequencers go into one bounded queue; the committer takes everything
   waiting (up to ``group_commit_records_max`` records or
   ``group_commit_bytes_max`` bytes), writes it in one RocksDB write, and
   answers each STORE.  Under load one fsync covers hundreds of STOREs, and
   the size limits bound the pause a write is for the loop.
3. A STORE of a sealed epoch is refused (PREEMPTED) unless it is a newer
   recovery's (``_rules.admit_store``).
4. Release pointers live in memory, move with RELEASEs and with the pointer
   every STORE carries, ride along with the next group commit, and are
   persisted at least every ``release_persist_s`` and at close.
5. A full disk never stops the node.  While ``space_low`` (free space under
   the node's floor, ``--min-free``) STOREs are refused with NOSPC without a
   write, and the sequencers store elsewhere; reads go on.  A write that fails
   for want of space anyway leaves RocksDB refusing every later write, so the
   LogsDB is *broken*: STOREs get NOSPC until ``reopen`` (once space is back)
   opens it afresh.

Everything else a node asks of its LogsDB goes through here too: the answers
to recovery (log info, seals, digests), trims, find-time, the partition
directory, reads for read streams, compaction's removals, retention.
"""

from __future__ import annotations

import errno
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import LogstrandError, Status
from ..logsdb import LogsDB, PutBatch
from ..wire import (
    Amend,
    AmendReply,
    FindTime,
    FindTimeReply,
    GetLogDirectory,
    LogDirectory,
    Store,
    StoreReply,
    Trim,
    TrimReply,
)
from . import _rules

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..logsdb import LogsDBOptions, PackedRead, StoredBatch
    from ..wire import Digest, GetDigest, LogInfo, LogInfoReply, Seal, SealReply
    from ._health_core import NodeClock
    from ._metrics import NodeMetrics

    #: Takes a STORE's reply without waiting (``Connection.offer``): a peer that
    #: does not read its replies must never hold up the group commit.
    Sink = Callable[[StoreReply], object]

_log = logging.getLogger("logstrand.node")


def _no_space(exc: BaseException) -> bool:
    """Did a LogsDB write fail because the disk is full?"""
    return (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or (
        "No space left on device" in str(exc)
    )


@attrs.define(eq=False)
class Committer:
    """The owner of one node's LogsDB (see the module docstring)."""

    node_id: int
    metrics: NodeMetrics
    queue_max: int
    records_max: int
    bytes_max: int
    release_persist_s: float
    #: ``on_released(log, lsn)`` when a release pointer moves.
    _on_released: Callable[[int, int], None]
    #: ``on_stored(log, last_lsn, release_lsn)`` after copies were written.
    _on_stored: Callable[[int, int, int], None]
    #: This node's clock (``NodeClock``): when copies were written, and what
    #: retention by time measures ages against.
    clock: NodeClock
    release: dict[int, int] = attrs.field(init=False, factory=dict)
    _release_dirty: set[int] = attrs.field(init=False, factory=set)
    _db: LogsDB | None = attrs.field(init=False, default=None)
    _where: tuple[str, LogsDBOptions | None] = attrs.field(init=False, default=("", None))
    #: Free space is under the floor: STOREs are refused (rule 5).
    space_low: bool = attrs.field(init=False, default=False)
    #: A write failed for want of space: the LogsDB needs ``reopen`` (rule 5).
    broken: bool = attrs.field(init=False, default=False)
    _in: trio.MemorySendChannel[tuple[Store, Any]] = attrs.field(init=False)
    _out: trio.MemoryReceiveChannel[tuple[Store, Any]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._in, self._out = trio.open_memory_channel[tuple[Store, Any]](self.queue_max)

    @property
    def db(self) -> LogsDB:
        assert self._db is not None, "the committer has not opened its LogsDB"
        return self._db

    # -- lifecycle ----------------------------------------------------------------

    def open(self, data_dir: str, options: LogsDBOptions | None) -> None:
        """Open the LogsDB on this (the event loop's) thread; it belongs to it."""
        self._db = LogsDB.open(data_dir, options, clock_ms=self.clock.now_ms)
        self._where = (data_dir, options)
        self.release = {log: self.db.release_pointer(log) for log in self.db.logs()}

    def reopen(self) -> None:
        """Open the LogsDB afresh after a write failed for want of space (rule 5).
        Release pointers learned meanwhile are kept (they are newer).

        Raises:
            Exception: the open failed (still no space): try again later.
        """
        if self._db is not None and not self._db.closed:
            try:
                self._db.close()
            except Exception as exc:  # expected after the failed write
                _log.info("node %d: closing the broken LogsDB: %s", self.node_id, exc)
        self._db = None
        self._db = LogsDB.open(*self._where, clock_ms=self.clock.now_ms)
        for log in self._db.logs():
            stored = self._db.release_pointer(log)
            if stored > self.release.get(log, 0):
                self.release[log] = stored
        self._release_dirty.update(self.release)
        self.broken = False
        _log.warning("node %d: LogsDB reopened; STOREs are taken again", self.node_id)

    def close(self) -> None:
        if self._db is not None and not self._db.closed:
            self._persist_releases(dict(self.release), sync=True)
            self._db.close()

    # -- storing -------------------------------------------------------------------

    async def submit(self, msg: Store, sink: Sink) -> None:
        """Queue a STORE; ``sink`` gets its reply.  Waits while the queue is full."""
        await self._in.send((msg, sink))

    async def run(self) -> None:
        """Group commit, until cancelled."""
        async for first in self._out:
            items = [first]
            records = len(first[0].batch)
            size = first[0].batch.payload_bytes
            while records < self.records_max and size < self.bytes_max:
                try:
                    item = self._out.receive_nowait()
                except trio.WouldBlock:
                    break
                items.append(item)
                records += len(item[0].batch)
                size += item[0].batch.payload_bytes
            await self._commit(items)

    async def _commit(self, items: list[tuple[Store, Sink]]) -> None:
        db = self.db
        puts: list[PutBatch] = []
        accepted: list[tuple[Store, Sink]] = []
        refused: list[tuple[Store, Sink]] = []
        corrupt: list[tuple[Store, Sink]] = []
        sync = False
        for msg, sink in items:
            if not msg.batch.body_ok():
                # Changed on its way here: the sequencer stores it elsewhere.
                _log.warning(
                    "node %d: STORE of log %d at %#x failed its checksum",
                    self.node_id,
                    msg.log_id,
                    msg.batch.first_lsn,
                )
                corrupt.append((msg, sink))
                continue
            if not _rules.admit_store(db, msg):
                refused.append((msg, sink))  # sealed: only a newer recovery may write
                continue
            if msg.released_lsn:
                # The sequencer's release pointer rides along with its STOREs.
                self.on_release(msg.log_id, msg.released_lsn)
            puts.append(PutBatch(msg.log_id, msg.batch, msg.producers))
            accepted.append((msg, sink))
            sync = sync or msg.sync
        status = Status.OK
        if puts and (self.space_low or self.broken):
            status = Status.NOSPC  # rule 5: no write is tried
        elif puts:
            status = self._write(puts, sync)
        replies = (
            (accepted, status),
            (refused, Status.PREEMPTED),
            (corrupt, Status.CHECKSUM_MISMATCH),
        )
        for batch, result in replies:
            for msg, sink in batch:
                # If the sequencer's connection is gone, it will retry elsewhere.
                sink(StoreReply(msg.store_id, msg.log_id, int(result), self.node_id))

    def _write(self, puts: list[PutBatch], sync: bool) -> Status:
        t0 = time.perf_counter()
        status = Status.OK
        # Release pointers ride along with the data (atomic, no extra write).
        dirty = {log: self.release[log] for log in self._release_dirty}
        self._release_dirty.clear()
        try:
            self.db.write(puts, sync=sync, releases=dirty)
        except LogstrandError as exc:
            _log.error("node %d: store failed: %s", self.node_id, exc)
            status = exc.status
        except Exception as exc:
            if not _no_space(exc):
                _log.exception("node %d: store failed", self.node_id)
                status = Status.FAILED
            else:
                _log.error("node %d: store failed, the disk is full: %s", self.node_id, exc)
                status = Status.NOSPC
                self.broken = True
        if status != Status.OK:
            # The pointers that were to ride along go with a later write.
            self._release_dirty.update(dirty)
        m = self.metrics
        m.group_commit_seconds.observe(time.perf_counter() - t0)
        m.group_commits.inc()
        m.stores.inc(len(puts))
        m.store_records.inc(sum(p.batch.count for p in puts))
        m.store_bytes.inc(sum(p.batch.payload_bytes for p in puts))
        if status == Status.OK:
            for p in puts:
                self._on_stored(p.log_id, p.batch.last_lsn, self.release.get(p.log_id, 0))
        return status

    # -- release pointers ---------------------------------------------------------

    def on_release(self, log_id: int, lsn: int) -> None:
        if lsn > self.release.get(log_id, 0):
            self.release[log_id] = lsn
            self._release_dirty.add(log_id)
            self._on_released(log_id, lsn)

    def release_of(self, log_id: int) -> int:
        return self.release.get(log_id, 0)

    def _persist_releases(self, releases: Mapping[int, int], sync: bool = False) -> None:
        if releases:
            self.db.set_releases(releases, sync=sync)

    async def persist_releases(self) -> None:
        """Persist moved release pointers now and then, until cancelled."""
        while True:
            await trio.sleep(self.release_persist_s)
            if self._release_dirty and not self.broken:
                dirty = {log: self.release[log] for log in self._release_dirty}
                self._release_dirty.clear()
                try:
                    self._persist_releases(dirty)
                except Exception as exc:
                    self._release_dirty.update(dirty)  # tried again next time
                    self.broken = self.broken or _no_space(exc)
                    raise

    # -- answers ---------------------------------------------------------------------

    def answer(self, msg: LogInfo | Seal | GetDigest) -> LogInfoReply | SealReply | Digest:
        """This node's answer to a recovery's question (from a peer or itself)."""
        return _rules.answer(self.db, self.node_id, self.release_of(msg.log_id), msg)

    def amend(self, msg: Amend) -> AmendReply:
        n = self.db.amend(msg.log_id, msg.first_lsn, msg.last_lsn, msg.old_copyset, msg.copyset)
        return AmendReply(msg.request_id, int(Status.OK), self.node_id, n)

    def trim(self, msg: Trim) -> TrimReply:
        try:
            point = self.db.trim(msg.log_id, msg.lsn)
        except LogstrandError as exc:
            return TrimReply(msg.request_id, int(exc.status), self.node_id)
        self.metrics.trims.inc()
        return TrimReply(msg.request_id, int(Status.OK), self.node_id, point)

    def find_time(self, msg: FindTime) -> FindTimeReply:
        db = self.db
        lsn = db.find_time(msg.log_id, msg.timestamp_ms)
        found = lsn if lsn <= db.last_lsn(msg.log_id) else 0
        return FindTimeReply(msg.request_id, int(Status.OK), found)

    def log_directory(self, msg: GetLogDirectory) -> LogDirectory:
        return _rules.log_directory(self.db, msg)

    def counts(self) -> tuple[int, int, int]:
        """Partitions, bytes on disk, and logs held (zeros while a reopen
        after a full disk has not succeeded: the node still answers)."""
        db = self._db
        if db is None or db.closed:
            return 0, 0, 0
        return len(db.partitions()), db.disk_bytes(), len(db.logs())

    # -- reads (for read streams) ------------------------------------------------

    def read_packed(self, log_id: int, start: int, until: int, **limits: Any) -> PackedRead:
        return self.db.read_packed(log_id, start, until, **limits)

    def read_batch(self, log_id: int, start: int, until: int, **limits: Any) -> StoredBatch:
        return self.db.read_batch(log_id, start, until, **limits)

    def trim_point(self, log_id: int) -> int:
        return self.db.trim_point(log_id)

    def clean_point(self, log_id: int) -> int:
        return self.db.clean_point(log_id)

    def last_lsn(self, log_id: int) -> int:
        return self.db.last_lsn(log_id)

    def logs(self) -> list[int]:
        return self.db.logs()

    # -- compaction's removals ----------------------------------------------------

    def set_clean_point(self, log_id: int, lsn: int) -> None:
        self.db.set_clean_point(log_id, lsn)

    def remove(self, log_id: int, lsns: list[int]) -> None:
        """Remove copies (stored batches rewritten without them), unsynced:
        ``reclaim`` syncs."""
        self.db.delete(log_id, lsns, sync=False)

    async def reclaim(self, log_id: int) -> None:
        """Make removals durable and give their space back (rule 1's exception)."""
        ranges = self.db.reclaim_ranges(log_id)
        await trio.to_thread.run_sync(functools.partial(self.db.compact_ranges, ranges))

    # -- maintenance -----------------------------------------------------------------

    def maintain(
        self,
        trim_points: Mapping[int, int],
        retention_ms: Mapping[int, int],
        retention_bytes: Mapping[int, int] | None = None,
    ) -> None:
        """Apply trims missed while down, time and space retention, and drop
        partitions whose records are all trimmed.  Retention by time waits
        while this node's clock is not measured or is off (``NodeClock``)."""
        db = self.db
        for log, point in trim_points.items():
            if point > db.trim_point(log):
                db.trim(log, point)
                self.metrics.trims.inc()
        if not self.clock.trusted:
            retention_ms = {}
        if retention_ms or retention_bytes:
            moved = db.apply_retention(
                retention_ms, now_ms=self.clock.now_ms(), retention_bytes=retention_bytes
            )
            if moved:
                _log.info("node %d: retention trimmed logs %s", self.node_id, sorted(moved))
        dropped = db.drop_partitions()
        if dropped:
            _log.info("node %d: dropped partitions %s", self.node_id, dropped)
            self.metrics.partitions_dropped.inc(len(dropped))
        self.metrics.partitions.set(len(db.partitions()))
        self.metrics.disk_bytes.set(db.disk_bytes())

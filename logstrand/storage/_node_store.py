"""A node's LogsDB and the rules of what is asked of it (pure: no trio).

``NodeStore`` decides and does what a node's requests mean for its LogsDB;
the group commit (``_group_commit.Committer``) feeds it from a queue on the
node, and the seeded simulation (``tests/sim``) calls it directly over a
LogsDB in memory: both run these rules, not copies of them.

Rules
-----
1. A STORE whose batch fails its checksum is refused (CHECKSUM_MISMATCH: the
   sequencer stores it elsewhere); one of a sealed epoch is refused
   (PREEMPTED) unless it is a newer recovery's (``_rules.admit_store``).
2. The STOREs admitted together are one LogsDB write; its result answers
   them all.
3. Release pointers live in memory, move with RELEASEs and with the pointer
   every STORE carries, ride along with the next write, and are persisted by
   the shell now and then (``dirty_releases``).
4. A full disk never stops the node.  While ``space_low`` (free space under
   the node's floor) STOREs are refused with NOSPC without a write.  A write
   that fails for want of space leaves RocksDB refusing every later write, so
   the LogsDB is *broken*: STOREs get NOSPC until the shell reopens it.
5. A read stream is served the copies above the trim point and within what
   the node may hand readers at all (``read_windows``, ``_rules.servable``).
6. Compaction removes only released copies, at or below the pass's end, that
   a newer record of their key supersedes (``compaction.drops``); the clean
   point moves first, so readers take what is missing there for COMPACTED.
7. A STORE never replaces a copy of its records that wins over it (a later
   wave, a recovery's): it is answered OK and not written (``_superseded``).
"""

from __future__ import annotations

import errno
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ..compaction import OffsetMap, drops
from ..errors import LogstrandError, Status
from ..logsdb import LogsDB, PutBatch
from ..records import TOMBSTONE, precedence
from ..wire import AmendReply, DropReply, FindTimeReply, StoreReply, TrimReply
from . import _rules

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Mapping, Sequence

    from ..batch import PackedBatch
    from ..logsdb import PackedRead, StoredBatch
    from ..wire import (
        Amend,
        Digest,
        DropCopies,
        FindTime,
        GetDigest,
        GetLogDirectory,
        LogDirectory,
        LogInfo,
        LogInfoReply,
        Seal,
        SealReply,
        Store,
        Trim,
    )
    from ._metrics import NodeMetrics
    from ._read_core import ReadFrom, ReadStreamCore

_log = logging.getLogger("logstrand.node")
#: Copies scanned per step of a DROP_COPIES.
DROP_SCAN_RECORDS = 4096


class Clock(Protocol):
    """The node's clock (``_health_core.NodeClock``)."""

    @property
    def trusted(self) -> bool: ...
    def now_ms(self) -> int: ...


def _no_space(exc: BaseException) -> bool:
    """Did a LogsDB write fail because the disk is full?"""
    return (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or (
        "No space left on device" in str(exc)
    )


@attrs.define(eq=False)
class NodeStore:
    """A node's LogsDB and its request rules (see the module docstring)."""

    node_id: int
    metrics: NodeMetrics
    #: ``on_released(log, lsn)`` when a release pointer moves.
    _on_released: Callable[[int, int], None]
    #: ``on_stored(log, last_lsn, release_lsn)`` after copies were written.
    _on_stored: Callable[[int, int, int], None]
    #: This node's clock: when copies were written, and what retention by
    #: time measures ages against.
    clock: Clock
    release: dict[int, int] = attrs.field(init=False, factory=dict)
    _release_dirty: set[int] = attrs.field(init=False, factory=set)
    _db: LogsDB | None = attrs.field(init=False, default=None)
    #: Each log's highest stored LSN as far as STOREs go (rule 7 reads it per
    #: STORE; LogsDB's own ``last_lsn`` walks every partition of the log).
    _tails: dict[int, int] = attrs.field(init=False, factory=dict)
    #: Free space is under the floor: STOREs are refused (rule 4).
    space_low: bool = attrs.field(init=False, default=False)
    #: A write failed for want of space: the LogsDB needs reopening (rule 4).
    broken: bool = attrs.field(init=False, default=False)

    @property
    def db(self) -> LogsDB:
        assert self._db is not None, "the node has not opened its LogsDB"
        return self._db

    def attach(self, db: LogsDB) -> None:
        """Take ``db`` as the node's LogsDB, and its persisted release pointers."""
        self._db = db
        self._tails.clear()
        self.release = {log: db.release_pointer(log) for log in db.logs()}

    # -- storing (rules 1, 2, 4) ------------------------------------------------------

    def admit(self, msg: Store) -> bool:
        """May ``msg`` write?  Not into a sealed epoch, but for a newer recovery."""
        return _rules.admit_store(self.db, msg)

    def commit(self, stores: list[Store]) -> list[StoreReply]:
        """Take these STOREs together: one write for those admitted; a reply each."""
        puts: list[PutBatch] = []
        #: The batches of ``puts`` by log: rule 7 looks only at its own log's,
        #: so that a write of many logs' copies costs no more than one per copy.
        by_log: dict[int, list[PackedBatch]] = {}
        verdicts: list[Status | None] = []
        sync = False
        for msg in stores:
            if not msg.batch.body_ok():
                # Changed on its way here: the sequencer stores it elsewhere.
                _log.warning(
                    "node %d: STORE of log %d at %#x failed its checksum",
                    self.node_id,
                    msg.log_id,
                    msg.batch.first_lsn,
                )
                verdicts.append(Status.CHECKSUM_MISMATCH)
            elif not self.admit(msg):
                verdicts.append(Status.PREEMPTED)  # sealed: only a newer recovery may write
            elif self._superseded(msg, by_log.get(msg.log_id, ())):
                verdicts.append(Status.OK)  # rule 7: a copy that wins is here already
            else:
                if msg.released_lsn:
                    # The sequencer's release pointer rides along with its STOREs.
                    self.on_release(msg.log_id, msg.released_lsn)
                puts.append(PutBatch(msg.log_id, msg.batch, msg.producers))
                by_log.setdefault(msg.log_id, []).append(msg.batch)
                verdicts.append(None)
                sync = sync or msg.sync
        status = Status.OK
        if puts and (self.space_low or self.broken):
            status = Status.NOSPC  # rule 4: no write is tried
        elif puts:
            status = self._write(puts, sync)
            if status == Status.OK:
                for put in puts:
                    tail = self._tails.get(put.log_id)
                    if tail is not None and put.batch.last_lsn > tail:
                        self._tails[put.log_id] = put.batch.last_lsn
        return [
            StoreReply(msg.store_id, msg.log_id, int(status if v is None else v), self.node_id)
            for msg, v in zip(stores, verdicts, strict=True)
        ]

    def _superseded(self, msg: Store, pending: Sequence[PackedBatch]) -> bool:
        """Rule 7: does a copy that wins over ``msg``'s (``records.precedence``)
        already cover its LSNs here, stored or about to be in this write?

        A STORE may arrive after a later one for the same records: a wave the
        sequencer gave up on, sent on a connection since replaced, or a late
        recovery's.  ``pending``: this write's batches of the log so far.
        Written, it would replace the better copy, and its
        copyset with one that no longer says where the copies are (rebuilding
        then misses them: found by the maintenance simulation).  Only a STORE
        at or below the log's tail here can meet one, so appends in order pay
        nothing."""
        b = msg.batch
        mine = precedence(b.flag_bits, msg.wave)

        def wins(other: PackedBatch) -> bool:
            covers = other.first_lsn <= b.first_lsn and other.last_lsn >= b.last_lsn
            return covers and precedence(other.flag_bits, other.wave) > mine

        if any(wins(other) for other in pending):
            return True
        tail = self._tails.get(msg.log_id)
        if tail is None:
            tail = self._tails[msg.log_id] = self.db.last_lsn(msg.log_id)
        if b.first_lsn > tail:
            return False
        got = self.db.read_packed(msg.log_id, b.first_lsn, b.last_lsn, max_records=b.count)
        return any(wins(stored) for stored in got.batches)

    def _write(self, puts: list[PutBatch], sync: bool) -> Status:
        t0 = time.perf_counter()
        status = Status.OK
        # Release pointers ride along with the data (atomic, no extra write).
        dirty = self.dirty_releases()
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
            self.undirty(dirty)
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

    def dirty_releases(self) -> dict[int, int]:
        """The release pointers moved since they were last written (taken:
        ``undirty`` them again if writing them fails)."""
        dirty = {log: self.release[log] for log in self._release_dirty}
        self._release_dirty.clear()
        return dirty

    def undirty(self, releases: Mapping[int, int]) -> None:
        self._release_dirty.update(releases)

    def read_windows(
        self, log_id: int, step: ReadFrom, core: ReadStreamCore, **limits: Any
    ) -> tuple[PackedRead, list[tuple[PackedBatch, int, int]]]:
        """One read of a stream's step (rule 5): what LogsDB returned, and each
        batch's window above the trim point and within the step (still to
        be cut to what is servable: ``_rules.servable_windows``)."""
        got = self.db.read_packed(
            log_id,
            step.start,
            step.until,
            max_records=limits.get("max_records", step.max_records),
            max_bytes=step.max_bytes,
            # Single-copy delivery: batches another node sends are passed
            # over without being sent or decoded.
            skip=core.not_mine if core.scd else None,
            tolerant=True,
        )
        # Below the local floor the copies are in the object store: the
        # stream's message says so (``local_floor``), and the reader reads them there.
        lo = max(step.start, self.db.low_point(log_id) + 1)
        items = [(b, max(b.first_lsn, lo), min(b.last_lsn, step.until)) for b in got.batches]
        return got, items

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

    def written(self) -> tuple[int, int]:
        """Bytes of records given to LogsDB since it opened, and bytes its
        flushes and compactions wrote for them (``IoBytes``)."""
        db = self._db
        if db is None or db.closed:
            return 0, 0
        io = db.io_bytes()
        return io.user, io.flush + io.compaction

    # -- reads (for read streams and rebuilding) ------------------------------------------------

    def read_packed(self, log_id: int, start: int, until: int, **limits: Any) -> PackedRead:
        return self.db.read_packed(log_id, start, until, **limits)

    def read_batch(self, log_id: int, start: int, until: int, **limits: Any) -> StoredBatch:
        return self.db.read_batch(log_id, start, until, **limits)

    def trim_point(self, log_id: int) -> int:
        return self.db.trim_point(log_id)

    def clean_point(self, log_id: int) -> int:
        return self.db.clean_point(log_id)

    def local_floor(self, log_id: int) -> int:
        return self.db.local_floor(log_id)

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

    def stored_bytes_to(self, log_id: int, end: int) -> int:
        """The bytes this node stores of the log above its trim point and at
        or below ``end``: the directory's entries below ``end``, and the
        stored batches of an entry that ``end`` cuts, counted as ``LogInfo``
        counts them (a batch that ``end`` cuts in proportion to its LSNs).

        The cut entry was once counted in proportion to its LSNs too.  But a
        pass leaves an entry's range as it was and its lower part nearly
        empty: ten records kept below ``end`` and forty dirty above it were
        counted as 96% clean, the dirty ratio fell under the log's, and the
        cleaner never came back for the forty."""
        trim = self.trim_point(log_id)
        total = 0
        for _, e in self.db.directory(log_id):
            if e.last_lsn <= trim or e.first_lsn > end:
                continue
            if e.last_lsn <= end:
                total += e.bytes
            else:
                total += self._batch_bytes(log_id, max(e.first_lsn, trim + 1), end)
        return total

    def _batch_bytes(self, log_id: int, first: int, end: int) -> int:
        """Stored bytes of the batches in [first, end] (``Write.put``'s count:
        the value and its key), a batch that ``end`` cuts in proportion."""
        total = 0
        lsn = first
        while lsn <= end:
            read = self.db.read_packed(log_id, lsn, end, max_records=DROP_SCAN_RECORDS)
            for pb in read.batches:
                if pb.first_lsn < first:
                    continue  # counted with the entry below (a batch across entries)
                size = len(pb.data) + 16
                if pb.last_lsn <= end:
                    total += size
                else:
                    span = pb.last_lsn - pb.first_lsn + 1
                    total += size * (end - pb.first_lsn + 1) // span
            if not read.batches or read.scanned_to < lsn:
                break
            lsn = read.scanned_to + 1
        return total

    def drop_copies(
        self, msg: DropCopies, offsets: OffsetMap | None = None
    ) -> Generator[int, None, DropReply]:
        """DROP_COPIES (rule 6): remove this node's copies that ``msg``'s
        offset map says are superseded, at or below its end.  Yields the bytes
        scanned after each batch (the shell throttles there); returns the
        reply.  The shell syncs and gives the space back afterwards.
        ``offsets``: ``msg``'s map, when the shell has built it already."""
        log = msg.log_id
        if offsets is None:
            offsets = OffsetMap.from_entries(msg.offsets)
        # Only released records are ever cleaned, as this node knows them.
        end = min(msg.end_lsn, self.release_of(log))
        # Readers may take LSNs missing up to here for compacted from now on:
        # only superseded copies go, never a key's latest record.
        self.set_clean_point(log, end)
        scanned = removed = removed_bytes = 0
        lsn = self.trim_point(log) + 1
        while lsn <= end:
            batch = self.read_batch(log, lsn, end, max_records=DROP_SCAN_RECORDS)
            if not batch.lsns:
                break
            gone = drops(
                batch.lsns,
                batch.timestamps_ms,
                batch.keys,
                [bool(f & TOMBSTONE) for f in batch.flags],
                offsets,
                end=end,
                old_clean_point=msg.old_clean_point,
                tombstone_horizon_ms=msg.tombstone_horizon_ms,
            )
            sizes = [len(p) if p is not None else 0 for p in batch.payloads]
            if gone:
                self.remove(log, [batch.lsns[i] for i in gone])
            gone_bytes = sum(sizes[i] for i in gone)
            scanned += len(batch.lsns)
            removed += len(gone)
            removed_bytes += gone_bytes
            lsn = batch.scanned_to + 1
            yield sum(sizes)
        # What is left up to ``end`` as the log's size counts it (stored
        # batches, their headers too), so that the dirty ratio compares like
        # with like: payload bytes against stored bytes left small logs
        # looking 90% dirty after a pass to their tail.
        kept_bytes = self.stored_bytes_to(log, end)
        self.metrics.compaction_records_removed.inc(removed)
        self.metrics.compaction_bytes_removed.inc(removed_bytes)
        ok = int(Status.OK)
        return DropReply(
            msg.request_id, ok, self.node_id, scanned, removed, removed_bytes, kept_bytes, end
        )

    # -- maintenance -----------------------------------------------------------------

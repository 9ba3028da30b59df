"""LogsDB: the local log store of a node.

Theory of operation
-------------------
Records live in time-ordered *partitions*, one column family each
(``_partitions.py``: the partition list and the per-log directory).  A record
goes into the newest partition whose start is at or below its timestamp, except
that a rewrite of an LSN already stored goes where the old copy is, so a key is
never in two partitions at once.  A ``meta`` column family holds the partition
list, the directory, and per log the trim point, seal, last clean epoch,
release pointer and clean point.  Space comes back by dropping whole
partitions whose records are all trimmed; retention moves trim points by time.

Threads: a LogsDB belongs to the thread that opened it, and every call comes
from it (asserted): a node's event loop, where the committer owns it
(``storage/_group_commit.py``; rocksdict holds the GIL anyway).  The exception is
``compact_ranges`` (RocksDB's flush and range compaction release the GIL and
touch no LogsDB state), run in a worker thread on ranges ``reclaim_ranges``
computed.  An in-memory engine (``logstrand.testing``) runs the same logic.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from typing import TYPE_CHECKING

from ..errors import ClosedError, InvalidArgumentError
from ..idempotence import _stored as stored_producers
from ..records import check_log_id
from ..types import LSN_MAX, LSN_OLDEST
from . import _format as fmt
from . import _scan
from ._engine import Batch, Engine, RocksEngine
from ._facts import EngineFacts
from ._format import DirEntry, StoredBatch, StoredRecord
from ._partitions import META_CF, LogsDBOptions, Partition, PartitionInfo, Partitions, PutBatch
from ._space import SpaceKeeping
from ._write import Write, amend

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from ._scan import PackedRead

Copyset = tuple[int, ...]

_U64_MAX = 2**64 - 1


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class LogsDB(EngineFacts, SpaceKeeping):
    """The local store of one node (one RocksDB instance, or an in-memory engine)."""

    def __init__(
        self,
        engine: Engine,
        options: LogsDBOptions | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._engine = engine
        self._thread = threading.get_ident()
        self.options = options or LogsDBOptions()
        self._clock_ms = clock_ms
        self._closed = False
        self._parts = Partitions(engine, self.options, clock_ms)
        self._meta: dict[str, dict[int, int]] = {
            k: {} for k in ("trim", "seal", "lce", "release", "clean", "floor")
        }
        self._producers = stored_producers.ProducerTables(META_CF)
        self._load()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        options: LogsDBOptions | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> LogsDB:
        """Open (creating if needed) the LogsDB in directory ``path``."""
        os.makedirs(path, exist_ok=True)
        blob_min = (options or LogsDBOptions()).blob_min_bytes
        return cls(RocksEngine(path, blob_min_bytes=blob_min), options, clock_ms=clock_ms)

    # -- opening ----------------------------------------------------------

    def _load(self) -> None:
        eng = self._engine
        if META_CF not in eng.column_families():
            eng.create_cf(META_CF)
        version = eng.get(META_CF, b"V")
        if version is None:
            batch = eng.new_batch()
            batch.put(META_CF, b"V", fmt.pack_u64(fmt.FORMAT_VERSION))
            eng.write(batch, sync=True)
        elif fmt.unpack_u64(version) != fmt.FORMAT_VERSION:
            raise InvalidArgumentError(f"LogsDB format {fmt.unpack_u64(version)} not supported")
        kinds = {fmt.META_PREFIXES[k]: k for k in self._meta}
        partitions: list[Partition] = []
        dir_entries: list[tuple[int, int, DirEntry]] = []
        for key, value in eng.items(META_CF, b"", None):
            prefix = key[:1]
            if prefix == b"P":
                pid = fmt.unpack_u64(key[1:])
                start, created = fmt.unpack_partition(value)
                partitions.append(Partition(pid, start, created))
            elif prefix == b"D":
                log_id, pid = fmt.parse_dir_key(key)
                dir_entries.append((log_id, pid, fmt.unpack_dir(value)))
            elif prefix in kinds:
                self._meta[kinds[prefix]][fmt.unpack_u64(key[1:])] = fmt.unpack_u64(value)
            elif prefix == stored_producers.PREFIX:
                self._producers.load(key, value)
        self._parts.load(partitions, dir_entries)
        evicted = eng.new_batch()
        if self._producers.evicted_into(evicted):
            eng.write(evicted, sync=False)

    # -- writing ----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("LogsDB is closed")
        assert threading.get_ident() == self._thread, "LogsDB is called from one thread only"

    def new_partition(self) -> int:
        """Start a new partition now, whatever the triggers say.  Returns its id."""
        self._check_open()
        return self._parts.new(self._clock_ms()).id

    def write(
        self,
        puts: Iterable[PutBatch],
        *,
        sync: bool = False,
        releases: Mapping[int, int] | None = None,
    ) -> None:
        """Store batches of records of any logs in one atomic RocksDB write.

        Each batch is one value.  A batch whose LSNs lie above everything
        stored for its log (the usual case) is put as it is.  Otherwise the
        stored batches it overlaps are split around it in the same write: a
        copy at an LSN already stored replaces it, the others stay, and
        stored batches of one log still never overlap.  (Two batches of one
        call that overlap each other go in two writes, in order.)  With
        ``sync=True`` the write is on disk when this returns.

        Raises:
            InvalidArgumentError: a bad log id or copyset; nothing is written.
        """
        self._check_open()
        parts = self._parts
        parts.maybe_roll(self._clock_ms())
        puts = list(puts)
        for put in puts:
            check_log_id(put.log_id, internal=True)
        w = Write(self._parts, self._engine)
        for put in puts:
            log_id, pb = put.log_id, put.batch
            if w.overlaps_pending(log_id, pb):
                self._commit(w, {}, sync=False)
                w = Write(self._parts, self._engine)
            if pb.first_lsn > max(parts.last_lsn(log_id), w.top.get(log_id, 0)):
                w.put(log_id, parts.partition_for(pb.timestamp_ms).id, pb)
            else:
                w.replace(log_id, pb)
        fresh = self._producers.stage(w.batch, puts)
        self._commit(w, releases or {}, sync=sync)
        self._producers.commit(fresh)

    def _commit(self, w: Write, releases: Mapping[int, int], *, sync: bool) -> None:
        moved = self._put_releases(w.batch, releases)
        if w.empty and not moved:
            return
        self._parts.put_entries(w.batch, w.touched)
        self._engine.write(w.batch, sync=sync)
        self._meta["release"].update(moved)
        # Only now, with the write done, does the in-memory view change.
        self._parts.written(w.touched, w.part_bytes)

    def amend(self, log_id: int, first: int, last: int, old: Copyset, new: Copyset) -> int:
        """Stored batches in [first, last] with copyset ``old`` get ``new`` (rebuilding)."""
        self._check_open()
        check_log_id(log_id, internal=True)
        w = Write(self._parts, self._engine)
        changed = amend(w, log_id, first, last, old, new)
        self._commit(w, {}, sync=False)
        return changed

    def delete(self, log_id: int, lsns: Iterable[int], *, sync: bool = False) -> int:
        """Remove the copies of these LSNs of a log.  Returns how many were there.

        For compaction (and tests that destroy data): each stored batch that
        holds one is rewritten without it, keeping the others' LSNs, in one
        write; space comes back when RocksDB compacts or the partition is
        dropped (``reclaim``).  Directory entries keep their ranges; their
        record and byte counts drop by what was removed.
        """
        self._check_open()
        check_log_id(log_id, internal=True)
        gone = sorted(set(lsns))
        if not gone:
            return 0
        w = Write(self._parts, self._engine)
        found = 0
        for pid, pb in _scan.stored(self._parts, self._engine, log_id, gone[0], gone[-1]):
            if pb.first_lsn > gone[-1]:
                break
            have = pb.lsns()
            lo = bisect.bisect_left(gone, pb.first_lsn)
            hi = bisect.bisect_right(gone, pb.last_lsn)
            drop = set(gone[lo:hi]).intersection(have)
            if not drop:
                continue
            found += len(drop)
            w.delete(pid, fmt.data_key(log_id, pb.first_lsn))
            keep = [i for i, x in enumerate(have) if x not in drop]
            left = 0
            if keep:
                kept = pb.select(keep)
                w.put(log_id, pid, kept, account=False)
                left = len(kept.data) + 16
            # Sizes as ``Write.put`` counts them: the value and its key.
            w.shrink(log_id, pid, len(drop), len(pb.data) + 16 - left)
        if found:
            self._commit(w, {}, sync=sync)
        return found

    def reclaim(self, log_id: int) -> None:
        """Give the space of a log's deleted copies back now (compaction),
        rather than when RocksDB compacts their files on its own."""
        self.compact_ranges(self.reclaim_ranges(log_id))

    def reclaim_ranges(self, log_id: int) -> list[tuple[str, bytes, bytes]]:
        """The key ranges (column family, first, last) that hold the log's copies."""
        self._check_open()
        check_log_id(log_id, internal=True)
        lo, hi = fmt.data_key(log_id, 0), fmt.data_key(log_id, LSN_MAX)
        return [(self._parts.by_id(pid).cf, lo, hi) for pid, _ in self._parts.entries(log_id)]

    def compact_ranges(self, ranges: list[tuple[str, bytes, bytes]]) -> None:
        """Flush (deletions become durable, WAL files with removed values go),
        then compact the ranges (the values go).  Any thread may call this."""
        if self._closed:
            raise ClosedError("LogsDB is closed")
        self._engine.flush()
        for cf, lo, hi in ranges:
            self._engine.compact_range(cf, lo, hi)

    # -- reading ----------------------------------------------------------

    def read_packed(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int = LSN_MAX,
        *,
        max_records: int = 4096,
        max_bytes: int = 1024 * 1024,
        skip: Callable[[tuple[int, ...]], bool] | None = None,
        tolerant: bool = False,
    ) -> PackedRead:
        """The stored batches of ``log_id`` overlapping [start, until] above the
        trim point, in LSN order, checked but not decoded: what read streams
        send.  A batch may reach below ``start`` (or the trim point) and above
        ``until``; whoever takes its records takes only those in range.

        Stops once ``max_records`` records or ``max_bytes`` bytes of batches
        are in (at least one batch).  ``skip(copyset)``: batches it says True
        for are passed over (single-copy delivery: another node sends them).
        Continue from ``scanned_to + 1``.  ``tolerant``: copies that cannot be
        read are listed in ``unreadable`` and the read goes on past them.

        Raises:
            CorruptionError: not ``tolerant``, and a stored batch is malformed
                or fails a checksum.
            InvalidArgumentError: bad log id or limits.
        """
        self._check_open()
        check_log_id(log_id, internal=True)
        if max_records <= 0 or max_bytes <= 0:
            raise InvalidArgumentError("max_records and max_bytes must be positive")
        start = max(start, self.low_point(log_id) + 1, LSN_OLDEST)
        return _scan.scan(
            self._parts, self._engine, log_id, start, until, max_records, max_bytes, skip, tolerant
        )

    def read_batch(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int = LSN_MAX,
        *,
        max_records: int = 4096,
        max_bytes: int = 1024 * 1024,
        skip: Callable[[tuple[int, ...]], bool] | None = None,
    ) -> StoredBatch:
        """Records of ``log_id`` with start ≤ LSN ≤ until, above the trim point,
        in LSN order, decoded into columns (``read_packed``, then each batch's
        records in range).  Limits as ``read_packed``'s, by whole batches.

        Raises:
            CorruptionError: a record failed its checksum.
            InvalidArgumentError: bad log id or limits.
        """
        got = self.read_packed(
            log_id, start, until, max_records=max_records, max_bytes=max_bytes, skip=skip
        )
        lo = max(start, self.low_point(log_id) + 1)
        out = StoredBatch(log_id)
        out.scanned_to = got.scanned_to
        for pb in got.batches:
            out.add(pb, lo, until)
            if len(out) >= max_records or out.payload_bytes >= max_bytes:
                out.cut(max_records, max_bytes)
                break
        return out

    def read(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int = LSN_MAX,
        *,
        max_records: int = 4096,
        max_bytes: int = 1024 * 1024,
    ) -> list[StoredRecord]:
        """``read_batch`` as a list of ``StoredRecord``."""
        batch = self.read_batch(log_id, start, until, max_records=max_records, max_bytes=max_bytes)
        return list(batch.records())

    def iter_records(
        self, log_id: int, start: int = LSN_OLDEST, until: int = LSN_MAX
    ) -> Iterator[StoredRecord]:
        """Every record in [start, until] above the trim point, in LSN order, lazily."""
        while start <= until:
            batch = self.read_batch(log_id, start, until)
            yield from batch.records()
            if batch.scanned_to >= until:
                return
            start = batch.scanned_to + 1

    def find_time(self, log_id: int, ts_ms: int) -> int:
        """The first LSN above the trim point with timestamp ≥ ``ts_ms``.

        When no stored record is that recent, the LSN after the last stored
        record (``LSN_OLDEST`` for an empty log, trim point + 1 if all trimmed).
        """
        self._check_open()
        check_log_id(log_id, internal=True)
        return _scan.find_time(self._parts, self._engine, log_id, ts_ms, self.low_point(log_id))

    # -- metadata ---------------------------------------------------------

    def _raise_meta(self, kind: str, log_id: int, value: int, sync: bool) -> int:
        self._check_open()
        check_log_id(log_id, internal=True)
        if type(value) is not int or not 0 <= value <= _U64_MAX:
            raise InvalidArgumentError(f"bad {kind} value {value!r}")
        store = self._meta[kind]
        old = store.get(log_id, 0)
        if value <= old:
            return old
        batch = self._engine.new_batch()
        batch.put(META_CF, fmt.log_key(kind, log_id), fmt.pack_u64(value))
        self._engine.write(batch, sync=sync)
        store[log_id] = value
        return value

    def trim(self, log_id: int, lsn: int, *, sync: bool = True) -> int:
        """Move the trim point up to ``lsn`` (never down).  Returns the trim point."""
        return self._raise_meta("trim", log_id, lsn, sync)

    def trim_point(self, log_id: int) -> int:
        return self._meta["trim"].get(log_id, 0)

    def set_local_floor(self, log_id: int, lsn: int, *, sync: bool = True) -> int:
        """Move the log's local floor up to ``lsn`` (never down): its records
        at or below are in the object store (tiered storage's local drop).
        Reads start above it as above the trim point, and partitions whose
        records are all at or below one or the other are dropped; unlike a
        trim, the records still exist, and read streams say so."""
        return self._raise_meta("floor", log_id, lsn, sync)

    def local_floor(self, log_id: int) -> int:
        return self._meta["floor"].get(log_id, 0)

    def low_point(self, log_id: int) -> int:
        """Below what this node holds none of the log: its trim point or its
        local floor."""
        m = self._meta
        return max(m["trim"].get(log_id, 0), m["floor"].get(log_id, 0))

    def seal(self, log_id: int, epoch: int, *, sync: bool = True) -> int:
        """Seal ``log_id`` up to ``epoch`` (never down).  Returns the seal."""
        return self._raise_meta("seal", log_id, epoch, sync)

    def seal_epoch(self, log_id: int) -> int:
        return self._meta["seal"].get(log_id, 0)

    def set_clean_point(self, log_id: int, lsn: int, *, sync: bool = True) -> int:
        """Raise the log's compaction clean point (never down); returns it.
        LSNs at or below it that no copy holds were removed by compaction."""
        return self._raise_meta("clean", log_id, lsn, sync)

    def clean_point(self, log_id: int) -> int:
        return self._meta["clean"].get(log_id, 0)

    def set_last_clean_epoch(self, log_id: int, epoch: int, *, sync: bool = True) -> int:
        return self._raise_meta("lce", log_id, epoch, sync)

    def last_clean_epoch(self, log_id: int) -> int:
        return self._meta["lce"].get(log_id, 0)

    def set_release(self, log_id: int, lsn: int, *, sync: bool = False) -> int:
        self.set_releases({log_id: lsn}, sync=sync)
        return self.release_pointer(log_id)

    def set_releases(self, releases: Mapping[int, int], *, sync: bool = False) -> None:
        """Move the release pointers of many logs forward in one write."""
        self._check_open()
        batch = self._engine.new_batch()
        moved = self._put_releases(batch, releases)
        if moved:
            self._engine.write(batch, sync=sync)
            self._meta["release"].update(moved)

    def _put_releases(self, batch: Batch, releases: Mapping[int, int]) -> dict[int, int]:
        """Add the release pointers that move forward to ``batch``; returns them."""
        store = self._meta["release"]
        moved = {log: lsn for log, lsn in releases.items() if lsn > store.get(log, 0)}
        for log_id, lsn in moved.items():
            check_log_id(log_id, internal=True)
            if type(lsn) is not int or not 0 <= lsn <= _U64_MAX:
                raise InvalidArgumentError(f"bad release LSN {lsn!r}")
            batch.put(META_CF, fmt.log_key("release", log_id), fmt.pack_u64(lsn))
        return moved

    def producers(self, log_id: int) -> bytes:
        """The log's producer table (``Producers.pack``): the last batches of
        each idempotent producer this node stored."""
        return self._producers.pack(log_id)

    def release_pointer(self, log_id: int) -> int:
        return self._meta["release"].get(log_id, 0)

    def last_lsn(self, log_id: int) -> int:
        """The highest LSN stored for the log (0 when none), trimmed or not."""
        return self._parts.last_lsn(log_id)

    def logs(self) -> list[int]:
        return self._parts.logs()

    def directory(self, log_id: int) -> list[tuple[int, DirEntry]]:
        """(partition id, entry) pairs of one log, oldest partition first."""
        return self._parts.entries(log_id)

    def partitions(self) -> list[PartitionInfo]:
        return self._parts.infos()

    def flush(self) -> None:
        self._check_open()
        self._engine.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.close()

    def __enter__(self) -> LogsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

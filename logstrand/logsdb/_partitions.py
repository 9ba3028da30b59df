"""The partitions of a LogsDB and their directory.

A partition is one RocksDB column family of records, started when the newest
is older than ``partition_duration_ms``, larger than ``partition_bytes_max``,
or has more than ``partition_files_max`` files.  The directory says, per log
and partition, which LSNs and timestamps the partition holds, with bytes and
records: reads pick partitions by it, find-time searches it first, retention
and trims drop whole partitions by it.  Every change of the directory is
written in the same RocksDB write as the records it describes, so after a
crash the directory never disagrees with the data.
"""

from __future__ import annotations

import bisect
import struct
from typing import TYPE_CHECKING

import attrs

from ..errors import InvalidArgumentError, ProtocolError
from ..types import lsn_epoch
from . import _format as fmt
from ._format import DirEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..batch import PackedBatch
    from ._engine import Batch, Engine

META_CF = "meta"
_U64_MAX = 2**64 - 1
_FILE_CHECK_INTERVAL_MS = 1000


@attrs.frozen
class PartitionInfo:
    id: int
    start_ts_ms: int
    created_ms: int
    bytes: int
    logs: int


@attrs.define
class Partition:
    id: int
    start_ts_ms: int
    created_ms: int
    bytes: int = 0

    @property
    def cf(self) -> str:
        return f"p{self.id:010d}"


@attrs.frozen
class LogsDBOptions:
    """Partitioning settings.  Defaults follow LogDevice's."""

    #: A new partition starts when the newest is older than this.
    partition_duration_ms: int = 15 * 60 * 1000
    #: ... or holds more than this many bytes of records.
    partition_bytes_max: int = 2 * 1024**3
    #: ... or has more than this many SST files.
    partition_files_max: int = 200
    #: Values (stored batches) of at least this many bytes go to RocksDB blob
    #: files (None: none do), so that a seek in a partition's many files
    #: reads keys and blob references, not every file's large batch there.
    #: Measured in docs/logsdb.md (``bench/logsdb.py --amplification``).
    blob_min_bytes: int | None = 64 * 1024
    #: A partition no longer written to (not the newest) with more than this
    #: many SST files averaging under ``merge_file_bytes`` is merged once into
    #: a few large files (``LogsDB.merge_small_files``): late records and
    #: rebuilding leave many tiny files in old partitions, and a read seeks in
    #: every file of a partition.  A partition of large files is never merged.
    merge_files_min: int = 32
    merge_file_bytes: int = 4 * 1024**2

    def __attrs_post_init__(self) -> None:
        if self.partition_duration_ms <= 0:
            raise InvalidArgumentError("partition_duration_ms must be positive")
        if self.partition_bytes_max <= 0:
            raise InvalidArgumentError("partition_bytes_max must be positive")
        if self.partition_files_max <= 0:
            raise InvalidArgumentError("partition_files_max must be positive")
        if self.merge_files_min <= 0 or self.merge_file_bytes <= 0:
            raise InvalidArgumentError("merge_files_min and merge_file_bytes must be positive")
        if self.blob_min_bytes is not None and self.blob_min_bytes <= 0:
            raise InvalidArgumentError("blob_min_bytes must be positive")


@attrs.frozen
class PutBatch:
    """One stored batch of one log: what one STORE carries (its header has
    the wave and copyset)."""

    log_id: int
    batch: PackedBatch
    #: Producer entries (``Producers.pack``) a recovery's STORE carries: kept
    #: in the same write as the batch, like those of the batch's own column.
    producers: bytes = b""

    @classmethod
    def of(
        cls, log_id: int, batch: PackedBatch, copyset: tuple[int, ...] = (), wave: int = 0
    ) -> PutBatch:
        """A batch under this copyset and wave (recovery-like writes, tests).

        Raises:
            InvalidArgumentError: a bad copyset.
        """
        try:
            packed = batch.reheader(copyset=copyset, wave=wave)
        except (ProtocolError, struct.error) as exc:
            raise InvalidArgumentError(f"log {log_id}: bad batch: {exc}") from None
        return cls(log_id, packed)


def merge_entry(old: DirEntry | None, new: DirEntry) -> DirEntry:
    if old is None:
        return new
    return DirEntry(
        min(old.first_lsn, new.first_lsn),
        max(old.last_lsn, new.last_lsn),
        min(old.min_ts_ms, new.min_ts_ms),
        max(old.max_ts_ms, new.max_ts_ms),
        old.bytes + new.bytes,
        old.records + new.records,
        max(old.written_ms, new.written_ms),
    )


class Partitions:
    """The partitions of one LogsDB, oldest first, and the per-log directory."""

    def __init__(self, engine: Engine, options: LogsDBOptions, clock_ms: Callable[[], int]) -> None:
        self._engine = engine
        self.options = options
        #: This node's clock (ms): when partitions start, when records were written.
        self.clock_ms = clock_ms
        self.list: list[Partition] = []
        self.dir: dict[int, dict[int, DirEntry]] = {}
        self._logs_in: dict[int, set[int]] = {}
        self._next_file_check_ms = 0

    # -- opening ----------------------------------------------------------

    def load(
        self,
        partitions: list[Partition],
        dir_entries: list[tuple[int, int, DirEntry]],
    ) -> None:
        """Take what the metadata lists, repairing what a crash interrupted."""
        self.list = sorted(partitions, key=lambda p: p.id)
        self._repair(dir_entries)
        known = {p.id for p in self.list}
        opened = self.clock_ms()
        for log_id, pid, entry in dir_entries:
            if pid in known:
                if not entry.written_ms:
                    # Written by an older version that did not keep the time:
                    # all we know is that it was written before now.
                    entry = entry._replace(written_ms=opened)
                self.dir.setdefault(log_id, {})[pid] = entry
                self._logs_in.setdefault(pid, set()).add(log_id)
        for p in self.list:
            p.bytes = sum(self.dir[log][p.id].bytes for log in self._logs_in.get(p.id, ()))
        if not self.list:
            # The first partition starts at time 0: it takes every older record.
            self.new(0)

    def _repair(self, dir_entries: list[tuple[int, int, DirEntry]]) -> None:
        """Finish what a crash interrupted: a partition create or drop."""
        eng = self._engine
        cfs = {n for n in eng.column_families() if n != META_CF}
        listed = {p.cf for p in self.list}
        # Created but never listed: the crash came before its first record, so
        # the column family is empty and can go.
        for name in sorted(cfs - listed):
            eng.drop_cf(name)
        # Listed but its column family is gone: the crash came in a drop.
        gone = [p for p in self.list if p.cf not in cfs]
        if gone:
            batch = eng.new_batch()
            gone_ids = {p.id for p in gone}
            for p in gone:
                batch.delete(META_CF, fmt.partition_key(p.id))
            for log_id, pid, _ in dir_entries:
                if pid in gone_ids:
                    batch.delete(META_CF, fmt.dir_key(log_id, pid))
            eng.write(batch, sync=True)
            self.list = [p for p in self.list if p.id not in gone_ids]

    # -- new partitions -------------------------------------------------------------

    def new(self, start_ts_ms: int) -> Partition:
        now = self.clock_ms()
        parts = self.list
        pid = parts[-1].id + 1 if parts else 1
        if parts:
            start_ts_ms = max(start_ts_ms, parts[-1].start_ts_ms)
            # The previous partition takes no more new data (late records aside):
            # flush its memtable, and the metadata's, so that the write-ahead
            # logs written so far can go (RocksDB keeps a log while any column
            # family has unflushed data in it) and a later drop of the
            # partition gives its space back at once.
            self._engine.flush_cf(parts[-1].cf)
            self._engine.flush_cf(META_CF)
        part = Partition(pid, start_ts_ms, now)
        self._engine.create_cf(part.cf)
        batch = self._engine.new_batch()
        batch.put(META_CF, fmt.partition_key(pid), fmt.pack_partition(start_ts_ms, now))
        self._engine.write(batch, sync=True)
        parts.append(part)
        return part

    def maybe_roll(self, now_ms: int) -> None:
        newest = self.list[-1]
        roll = (
            now_ms - newest.created_ms >= self.options.partition_duration_ms
            or newest.bytes >= self.options.partition_bytes_max
        )
        if not roll and now_ms >= self._next_file_check_ms:
            self._next_file_check_ms = now_ms + _FILE_CHECK_INTERVAL_MS
            roll = self._engine.cf_file_count(newest.cf) > self.options.partition_files_max
        if roll:
            self.new(now_ms)

    # -- lookups ------------------------------------------------------------------------

    def by_id(self, pid: int) -> Partition:
        for p in self.list:
            if p.id == pid:
                return p
        raise AssertionError(f"partition {pid} not found")

    def partition_for(self, timestamp_ms: int) -> Partition:
        """The partition a new batch stamped ``timestamp_ms`` goes to."""
        newest = self.list[-1]
        if timestamp_ms >= newest.start_ts_ms:
            return newest
        starts = [p.start_ts_ms for p in self.list]
        return self.list[max(0, bisect.bisect_right(starts, timestamp_ms) - 1)]

    def entries(self, log_id: int) -> list[tuple[int, DirEntry]]:
        """(partition id, entry) pairs of one log, oldest partition first."""
        return sorted(self.dir.get(log_id, {}).items())

    def last_lsn(self, log_id: int) -> int:
        return max((e.last_lsn for e in self.dir.get(log_id, {}).values()), default=0)

    def logs(self) -> list[int]:
        return sorted(log for log, entries in self.dir.items() if entries)

    def infos(self) -> list[PartitionInfo]:
        return [
            PartitionInfo(
                p.id, p.start_ts_ms, p.created_ms, p.bytes, len(self._logs_in.get(p.id, ()))
            )
            for p in self.list
        ]

    # -- changes ----------------------------------------------------------------------

    def put_entries(self, batch: Batch, touched: Mapping[tuple[int, int], DirEntry]) -> None:
        """Add directory entries to ``batch`` (the write of their records)."""
        for (log_id, pid), entry in touched.items():
            batch.put(META_CF, fmt.dir_key(log_id, pid), fmt.pack_dir(entry))

    def written(
        self, touched: Mapping[tuple[int, int], DirEntry], part_bytes: Mapping[int, int]
    ) -> None:
        """The write is done: take its directory entries into memory."""
        for (log_id, pid), entry in touched.items():
            self.dir.setdefault(log_id, {})[pid] = entry
            self._logs_in.setdefault(pid, set()).add(log_id)
        for p in self.list:
            p.bytes += part_bytes.get(p.id, 0)

    def retention_targets(
        self,
        retention_ms: Mapping[int, int],
        now_ms: int,
        retention_bytes: Mapping[int, int],
        trims: Mapping[int, int],
    ) -> dict[int, int]:
        """Where retention moves trim points (only those that move): by time,
        then by space, at partition boundaries; the newest partition stays.

        Only whole directory entries move a trim point, and only the oldest
        ones in LSN order, so a trim never skips a record still in retention.
        """
        out: dict[int, int] = {}
        for log, keep_ms in retention_ms.items():
            target = self.retention_target(log, now_ms - keep_ms)
            if target > trims.get(log, 0):
                out[log] = target
        for log, keep in retention_bytes.items():
            target = self.space_target(log, keep, max(out.get(log, 0), trims.get(log, 0)))
            if target > max(out.get(log, 0), trims.get(log, 0)):
                out[log] = target
        return out

    def retention_target(self, log_id: int, cutoff_ms: int) -> int:
        """The highest LSN a trim may reach for records older than ``cutoff_ms``:
        whole directory entries only, the oldest in LSN order, never into an
        entry that must be kept (entries may overlap: late records).

        A record's age counts from the *later* of its timestamp and the time
        this node wrote it: a sequencer whose clock is slow stamps fresh
        records in the past, and they must not look expired; a storage node
        ages what it wrote by its own clock, the one ``cutoff_ms`` is on.
        """
        newest = self.list[-1].id
        target = 0
        for first, pid, entry in sorted(
            (e.first_lsn, pid, e) for pid, e in self.dir.get(log_id, {}).items()
        ):
            newest_ts = max(entry.max_ts_ms, entry.written_ms)
            if pid == newest or newest_ts >= cutoff_ms:
                target = min(target, first - 1)
                break
            target = max(target, entry.last_lsn)
        return target

    def space_target(self, log_id: int, keep_bytes: int, trim: int) -> int:
        """The highest LSN a trim may reach so that the log keeps at least
        ``keep_bytes``: the oldest whole entries go first, each only while the
        entries after it still hold the bound (Kafka's ``retention.bytes``),
        never the newest partition's (0: nothing to trim).  A quiet log whose
        newest entry alone passes the bound keeps that entry: retention by
        space never empties a log.

        The bound is the *log's*, and this node holds only some of its
        records: each entry counts for the log's bytes over the LSNs it spans
        (its own average record size times the span), not for this node's
        copies.  Every node then trims near the same LSN however unevenly
        copysets fell (a few large batches can put most of a range on one
        node; counting own copies against a share of the bound kept only
        80% of it there), and a reader, which starts past the highest trim
        point it meets, still finds the bound."""
        newest = self.list[-1].id
        entries = sorted(
            (e.first_lsn, pid, e)
            for pid, e in self.dir.get(log_id, {}).items()
            if e.last_lsn > trim
        )
        # The oldest entry counts from its own first LSN (what came before it
        # may never have been this node's business); each later one from
        # where the previous ended: the LSNs between them went to other nodes.
        sizes, covered = [], (entries[0][0] - 1 if entries else 0)
        for _, _, e in entries:
            sizes.append(_log_bytes(e, covered))
            covered = max(covered, e.last_lsn)
        total = sum(sizes)
        target = 0
        for (_, pid, entry), size in zip(entries, sizes, strict=True):
            if total - size < keep_bytes or pid == newest:
                break
            target = entry.last_lsn
            total -= size
        return target

    def drop_trimmed(self, trims: Mapping[int, int]) -> list[int]:
        """Drop every partition (but the newest) whose records are all trimmed;
        returns their ids."""
        dropped: list[int] = []
        for part in list(self.list[:-1]):
            logs = self._logs_in.get(part.id, set())
            if all(self.dir[log][part.id].last_lsn <= trims.get(log, 0) for log in logs):
                self._drop(part, logs)
                dropped.append(part.id)
        return dropped

    def _drop(self, part: Partition, logs: set[int]) -> None:
        # Column family first, then the metadata: a crash between the two is
        # repaired on open (listed partition, missing column family).
        self._engine.drop_cf(part.cf)
        batch = self._engine.new_batch()
        batch.delete(META_CF, fmt.partition_key(part.id))
        for log in logs:
            batch.delete(META_CF, fmt.dir_key(log, part.id))
        self._engine.write(batch, sync=True)
        for log in logs:
            del self.dir[log][part.id]
        self._logs_in.pop(part.id, None)
        self.list.remove(part)


def _log_bytes(entry: DirEntry, covered: int) -> int:
    """The log's bytes (every node's records, one copy each) over the LSNs
    from ``covered`` + 1 to ``entry``'s last (older entries counted the ones
    before), from the entry's own average record size.  LSNs within an epoch
    are dense, so the span counts the log's records; across an epoch
    boundary it says nothing, and only this node's own bytes count (fewer:
    the log keeps more, never less)."""
    if not entry.records:
        return entry.bytes
    first = covered + 1
    if first > entry.last_lsn:
        return 0  # inside an older entry's span: counted there
    if lsn_epoch(first) != lsn_epoch(entry.last_lsn):
        first = entry.first_lsn  # a new epoch began between the two entries
        if lsn_epoch(first) != lsn_epoch(entry.last_lsn):
            return entry.bytes
    span = entry.last_lsn - first + 1
    return entry.bytes * span // entry.records

"""LogsDB: the local log store of a node.

Theory of operation
-------------------
Records live in *partitions*, one column family each, ordered by time.  Every
partition has a start timestamp; a record goes into the newest partition whose
start is at or below the record's timestamp (so late records may land in an
older partition), except that a rewrite of an LSN already stored goes where
the old copy is, so a key is never in two partitions at once.

A ``meta`` column family holds the partition list, the partition directory
(per log and partition: first/last LSN, min/max timestamp, bytes, records) and
per-log trim point, seal, last clean epoch and release pointer.  Directory
entries are written in the same RocksDB write as the records they describe, so
after a crash the directory never disagrees with the data.

Space comes back only by dropping whole partitions: a partition that is not
the newest and whose every directory entry is at or below its log's trim
point is dropped with its column family.  Retention moves trim points forward
to partition-entry boundaries by time, then the same drop applies.

Everything here is synchronous and single-threaded; the node calls it from one
worker thread at a time.  An in-memory engine (``logstrand.testing``) runs the
very same logic without RocksDB.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import time
from typing import TYPE_CHECKING

import attrs

from ..errors import ClosedError, InvalidArgumentError
from ..types import LSN_MAX, LSN_OLDEST
from ..wire import RecordBatch
from . import _format as fmt
from ._engine import Batch, Engine, RocksEngine
from ._format import DirEntry, StoredBatch, StoredRecord

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

META_CF = "meta"
_U64_MAX = 2**64 - 1
#: read_batch seeks past at most this many long skipped runs per call.
SEEKS_MAX = 64
_FILE_CHECK_INTERVAL_MS = 1000


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@attrs.frozen
class LogsDBOptions:
    """Partitioning settings.  Defaults follow LogDevice's."""

    #: A new partition starts when the newest is older than this.
    partition_duration_ms: int = 15 * 60 * 1000
    #: ... or holds more than this many bytes of records.
    partition_bytes_max: int = 2 * 1024**3
    #: ... or has more than this many SST files.
    partition_files_max: int = 200

    def __attrs_post_init__(self) -> None:
        if self.partition_duration_ms <= 0:
            raise InvalidArgumentError("partition_duration_ms must be positive")
        if self.partition_bytes_max <= 0:
            raise InvalidArgumentError("partition_bytes_max must be positive")
        if self.partition_files_max <= 0:
            raise InvalidArgumentError("partition_files_max must be positive")


@attrs.frozen
class PutBatch:
    """Records of one log stored under one copyset: what one STORE carries."""

    log_id: int
    records: RecordBatch
    copyset: tuple[int, ...] = ()
    wave: int = 0


@attrs.frozen
class PartitionInfo:
    id: int
    start_ts_ms: int
    created_ms: int
    bytes: int
    logs: int


@attrs.define
class _Partition:
    id: int
    start_ts_ms: int
    created_ms: int
    bytes: int = 0

    @property
    def cf(self) -> str:
        return f"p{self.id:010d}"


def _check_log(log_id: int) -> None:
    if type(log_id) is not int or not 0 < log_id <= _U64_MAX:
        raise InvalidArgumentError(f"bad log id {log_id!r}")


def _merge_entry(old: DirEntry | None, new: DirEntry) -> DirEntry:
    if old is None:
        return new
    return DirEntry(
        min(old.first_lsn, new.first_lsn),
        max(old.last_lsn, new.last_lsn),
        min(old.min_ts_ms, new.min_ts_ms),
        max(old.max_ts_ms, new.max_ts_ms),
        old.bytes + new.bytes,
        old.records + new.records,
    )


class LogsDB:
    """The local store of one node (one RocksDB instance, or an in-memory engine)."""

    def __init__(
        self,
        engine: Engine,
        options: LogsDBOptions | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._engine = engine
        self.options = options or LogsDBOptions()
        self._clock_ms = clock_ms
        self._closed = False
        self._partitions: list[_Partition] = []
        self._dir: dict[int, dict[int, DirEntry]] = {}
        self._logs_in: dict[int, set[int]] = {}
        self._meta: dict[str, dict[int, int]] = {
            k: {} for k in ("trim", "seal", "lce", "release", "clean")
        }
        self._next_file_check_ms = 0
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
        return cls(RocksEngine(path), options, clock_ms=clock_ms)

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
        dir_entries: list[tuple[int, int, DirEntry]] = []
        for key, value in eng.items(META_CF, b"", None):
            prefix = key[:1]
            if prefix == b"P":
                pid = fmt.unpack_u64(key[1:])
                start, created = fmt.unpack_partition(value)
                self._partitions.append(_Partition(pid, start, created))
            elif prefix == b"D":
                log_id, pid = fmt.parse_dir_key(key)
                dir_entries.append((log_id, pid, fmt.unpack_dir(value)))
            elif prefix in kinds:
                self._meta[kinds[prefix]][fmt.unpack_u64(key[1:])] = fmt.unpack_u64(value)
        self._partitions.sort(key=lambda p: p.id)
        self._repair_partitions(dir_entries)
        known = {p.id for p in self._partitions}
        for log_id, pid, entry in dir_entries:
            if pid in known:
                self._dir.setdefault(log_id, {})[pid] = entry
                self._logs_in.setdefault(pid, set()).add(log_id)
        for p in self._partitions:
            p.bytes = sum(self._dir[log][p.id].bytes for log in self._logs_in.get(p.id, ()))
        if not self._partitions:
            # The first partition starts at time 0: it takes every older record.
            self._new_partition(0)

    def _repair_partitions(self, dir_entries: list[tuple[int, int, DirEntry]]) -> None:
        """Finish what a crash interrupted: a partition create or drop."""
        eng = self._engine
        cfs = {n for n in eng.column_families() if n != META_CF}
        listed = {p.cf for p in self._partitions}
        # Created but never listed: the crash came before its first record, so
        # the column family is empty and can go.
        for name in sorted(cfs - listed):
            eng.drop_cf(name)
        # Listed but its column family is gone: the crash came in a drop.
        gone = [p for p in self._partitions if p.cf not in cfs]
        if gone:
            batch = eng.new_batch()
            gone_ids = {p.id for p in gone}
            for p in gone:
                batch.delete(META_CF, fmt.partition_key(p.id))
            for log_id, pid, _ in dir_entries:
                if pid in gone_ids:
                    batch.delete(META_CF, fmt.dir_key(log_id, pid))
            eng.write(batch, sync=True)
            self._partitions = [p for p in self._partitions if p.id not in gone_ids]

    def _new_partition(self, start_ts_ms: int) -> _Partition:
        now = self._clock_ms()
        pid = self._partitions[-1].id + 1 if self._partitions else 1
        if self._partitions:
            start_ts_ms = max(start_ts_ms, self._partitions[-1].start_ts_ms)
        if self._partitions:
            # The previous partition takes no more new data (late records aside):
            # flush its memtable, and the metadata's, so that the write-ahead
            # logs written so far can go (RocksDB keeps a log while any column
            # family has unflushed data in it) and a later drop of the
            # partition gives its space back at once.
            self._engine.flush_cf(self._partitions[-1].cf)
            self._engine.flush_cf(META_CF)
        part = _Partition(pid, start_ts_ms, now)
        self._engine.create_cf(part.cf)
        batch = self._engine.new_batch()
        batch.put(META_CF, fmt.partition_key(pid), fmt.pack_partition(start_ts_ms, now))
        self._engine.write(batch, sync=True)
        self._partitions.append(part)
        return part

    # -- writing ----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("LogsDB is closed")

    def _maybe_roll(self, now_ms: int) -> None:
        newest = self._partitions[-1]
        roll = (
            now_ms - newest.created_ms >= self.options.partition_duration_ms
            or newest.bytes >= self.options.partition_bytes_max
        )
        if not roll and now_ms >= self._next_file_check_ms:
            self._next_file_check_ms = now_ms + _FILE_CHECK_INTERVAL_MS
            roll = self._engine.cf_file_count(newest.cf) > self.options.partition_files_max
        if roll:
            self._new_partition(now_ms)

    def new_partition(self) -> int:
        """Start a new partition now, whatever the triggers say.  Returns its id."""
        self._check_open()
        return self._new_partition(self._clock_ms()).id

    def _existing_partition(self, log_id: int, lsn: int) -> _Partition | None:
        """The partition already holding (log, lsn), if any.  Only for rewrites."""
        for pid, entry in self._dir.get(log_id, {}).items():
            if entry.first_lsn <= lsn <= entry.last_lsn:
                part = self._partition_by_id(pid)
                if self._engine.get(part.cf, fmt.data_key(log_id, lsn)) is not None:
                    return part
        return None

    def _partition_by_id(self, pid: int) -> _Partition:
        for p in self._partitions:
            if p.id == pid:
                return p
        raise AssertionError(f"partition {pid} not found")

    def _route(self, put: PutBatch) -> Iterator[tuple[_Partition, list[int] | None]]:
        """Group the records of a batch by the partition each goes to."""
        rb = put.records
        n = len(rb.lsns)
        newest = self._partitions[-1]
        entries = self._dir.get(put.log_id)
        top_lsn = max((e.last_lsn for e in entries.values()), default=0) if entries else 0
        if min(rb.timestamps_ms) >= newest.start_ts_ms and min(rb.lsns) > top_lsn:
            yield newest, None  # the common case, all at the tail: no regrouping
            return
        starts = [p.start_ts_ms for p in self._partitions]
        groups: dict[int, list[int]] = {}
        for i in range(n):
            part = None
            if rb.lsns[i] <= top_lsn:
                part = self._existing_partition(put.log_id, rb.lsns[i])
            if part is None:
                part = self._partitions[
                    max(0, bisect.bisect_right(starts, rb.timestamps_ms[i]) - 1)
                ]
            groups.setdefault(part.id, []).append(i)
        for pid, idxs in groups.items():
            yield self._partition_by_id(pid), idxs

    def write(
        self,
        puts: Iterable[PutBatch],
        *,
        sync: bool = False,
        releases: Mapping[int, int] | None = None,
    ) -> None:
        """Store batches of records of any logs in one atomic RocksDB write.

        A record at an LSN already stored replaces it.  With ``sync=True`` the
        write is on disk when this returns.

        Raises:
            InvalidArgumentError: a bad log id, key or copyset; nothing is written.
        """
        self._check_open()
        now = self._clock_ms()
        self._maybe_roll(now)
        batch = self._engine.new_batch()
        touched: dict[tuple[int, int], DirEntry] = {}
        part_bytes: dict[int, int] = {}
        for put in puts:
            _check_log(put.log_id)
            rb = put.records
            if not rb.lsns:
                continue
            cs = fmt.pack_copyset(put.copyset)
            prefix = put.log_id.to_bytes(8, "big")
            for part, idxs in self._route(put):
                if idxs is None:
                    lsns, tss, fls = rb.lsns, rb.timestamps_ms, rb.flags
                    keys, pays = rb.keys, rb.payloads
                else:
                    lsns = tuple(rb.lsns[i] for i in idxs)
                    tss = tuple(rb.timestamps_ms[i] for i in idxs)
                    fls = tuple(rb.flags[i] for i in idxs)
                    keys = tuple(rb.keys[i] for i in idxs)
                    pays = tuple(rb.payloads[i] for i in idxs)
                values = fmt.encode_values(tss, fls, put.wave, cs, keys, pays)
                batch_bytes = sum(map(len, values)) + 16 * len(values)
                batch.put_many(part.cf, [prefix + n.to_bytes(8, "big") for n in lsns], values)
                entry = DirEntry(min(lsns), max(lsns), min(tss), max(tss), batch_bytes, len(lsns))
                k = (put.log_id, part.id)
                touched[k] = _merge_entry(
                    touched.get(k) or self._dir.get(put.log_id, {}).get(part.id), entry
                )
                part_bytes[part.id] = part_bytes.get(part.id, 0) + batch_bytes
        moved = self._put_releases(batch, releases or {})
        if not touched and not moved:
            return
        for (log_id, pid), entry in touched.items():
            batch.put(META_CF, fmt.dir_key(log_id, pid), fmt.pack_dir(entry))
        self._engine.write(batch, sync=sync)
        self._meta["release"].update(moved)
        # Only now, with the write done, does the in-memory view change.
        for (log_id, pid), entry in touched.items():
            self._dir.setdefault(log_id, {})[pid] = entry
            self._logs_in.setdefault(pid, set()).add(log_id)
        for p in self._partitions:
            p.bytes += part_bytes.get(p.id, 0)

    def delete(
        self, log_id: int, lsns: Iterable[int], *, sync: bool = False, present: bool = False
    ) -> int:
        """Remove the copies of these LSNs of a log.  Returns how many were there.

        For compaction and for tests that destroy data; space comes back when
        RocksDB compacts or the partition is dropped (``reclaim``).  Directory
        entries keep their ranges (their counts become approximate).

        ``present``: the caller just read these copies, so no lookup is needed
        to find them where one partition alone covers the LSN (the count is
        then the number asked for).
        """
        self._check_open()
        _check_log(log_id)
        batch = self._engine.new_batch()
        found = 0
        ranges = sorted(
            (e.first_lsn, e.last_lsn, pid) for pid, e in self._dir.get(log_id, {}).items()
        )
        cfs = {pid: self._partition_by_id(pid).cf for _, _, pid in ranges}
        for lsn in lsns:
            part_cf: str | None = None
            if present:
                covering = [pid for lo, hi, pid in ranges if lo <= lsn <= hi]
                if len(covering) == 1:
                    part_cf = cfs[covering[0]]
            if part_cf is None:
                part = self._existing_partition(log_id, lsn)
                part_cf = None if part is None else part.cf
            if part_cf is not None:
                batch.delete(part_cf, fmt.data_key(log_id, lsn))
                found += 1
        if found:
            self._engine.write(batch, sync=sync)
        return found

    def reclaim(self, log_id: int) -> None:
        """Make deletions of a log's copies durable and give their space back
        (for compaction; RocksDB would otherwise keep deleted values until it
        compacts those files on its own).

        Flushing every column family makes the deletions durable, and lets the
        write-ahead log files that hold the removed values go; compacting the
        log's key range in each partition then drops the values themselves.
        """
        self._check_open()
        _check_log(log_id)
        lo, hi = fmt.data_key(log_id, 0), fmt.data_key(log_id, LSN_MAX)
        self._engine.flush()
        for pid in list(self._dir.get(log_id, {})):
            self._engine.compact_range(self._partition_by_id(pid).cf, lo, hi)

    # -- reading ----------------------------------------------------------

    def _sources(self, log_id: int, start: int, until: int) -> list[Iterator[tuple[bytes, bytes]]]:
        """(key, value) iterators over the partitions holding [start, until], in LSN order."""
        found = sorted(
            (e.first_lsn, e.last_lsn, pid)
            for pid, e in self._dir.get(log_id, {}).items()
            if e.last_lsn >= start and e.first_lsn <= until
        )
        lo = fmt.data_key(log_id, start)
        hi = fmt.data_key(log_id, until + 1) if until < LSN_MAX else None
        if hi is None and log_id < _U64_MAX:
            hi = fmt.data_key(log_id + 1, 0)
        iters = [self._engine.items(self._partition_by_id(pid).cf, lo, hi) for _, _, pid in found]
        if any(a[1] >= b[0] for a, b in itertools.pairwise(found)):
            # Late or rebuilt records made partitions overlap in LSNs: merge.
            # A key is only ever in one partition, so no duplicates arise.
            return [heapq.merge(*iters, key=lambda kv: kv[0])]
        return iters

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
        """Records of ``log_id`` with start ≤ LSN ≤ until, above the trim point, in LSN order.

        Stops after ``max_records`` records or once ``max_bytes`` of payload are
        in; at least one record is returned when there is one, however large.
        Continue from ``scanned_to + 1`` (without ``skip``: the last LSN + 1).

        ``skip(copyset)``: pass over runs of records stored under a copyset it
        says True for, without decoding them (see ``decode_into``); a long run
        is passed over by point lookups on its STORE's identity (timestamp,
        wave, copyset).  Should two STOREs with one identity sandwich another
        (all within one millisecond), the one between may be passed over too:
        ``skip`` is for single-copy delivery, whose reader notices LSNs that no
        node sent and asks every node for them.

        Raises:
            CorruptionError: a record failed its checksum.
            InvalidArgumentError: bad log id or limits.
        """
        self._check_open()
        _check_log(log_id)
        if max_records <= 0 or max_bytes <= 0:
            raise InvalidArgumentError("max_records and max_bytes must be positive")
        out = StoredBatch(log_id)
        start = max(start, self._meta["trim"].get(log_id, 0) + 1, LSN_OLDEST)
        out.scanned_to = start - 1
        if start > until:
            out.scanned_to = until
            return out
        for _ in range(SEEKS_MAX):
            for items in self._sources(log_id, start, until):
                if fmt.decode_into(out, items, max_records, max_bytes, skip):
                    break
            else:
                out.scanned_to = until  # everything up to ``until`` was looked at
                return out
            if out.skip_hint is None:
                return out
            identity, last = out.skip_hint
            out.skip_hint = None
            end = self._run_end(log_id, identity, last, until)
            out.scanned_to = max(out.scanned_to, end)
            if end >= until:
                out.scanned_to = until
                return out
            start = end + 1
        return out

    def _run_end(self, log_id: int, identity: bytes, last: int, until: int) -> int:
        """The last LSN of the STORE run ``last`` is in, found by point lookups.

        Records of one STORE are consecutive LSNs that share ``identity``
        (timestamp, wave, copyset): doubling steps, then bisection, over the
        partition that holds ``last``.  A miss only ends the run early (the
        caller then reads on record by record).
        """
        part = next(
            (
                (pid, e)
                for pid, e in self._dir.get(log_id, {}).items()
                if e.first_lsn <= last <= e.last_lsn
            ),
            None,
        )
        if part is None:
            return last
        cf = self._partition_by_id(part[0]).cf
        hi = min(until, part[1].last_lsn)

        def same(lsn: int) -> bool:
            value = self._engine.get(cf, fmt.data_key(log_id, lsn))
            return value is not None and fmt.store_identity(value) == identity

        inside, step = last, 256
        outside = hi + 1
        while inside + step <= hi:
            if not same(inside + step):
                outside = inside + step
                break
            inside += step
            step *= 2
        else:
            if inside < hi and same(hi):
                return hi
        while outside - inside > 1:
            mid = (inside + outside) // 2
            if same(mid):
                inside = mid
            else:
                outside = mid
        return inside

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
            if not batch.lsns:
                return
            yield from batch.records()
            if batch.lsns[-1] >= until:
                return
            start = batch.lsns[-1] + 1

    def find_time(self, log_id: int, ts_ms: int) -> int:
        """The first LSN above the trim point with timestamp ≥ ``ts_ms``.

        When no stored record is that recent, the LSN after the last stored
        record (``LSN_OLDEST`` for an empty log, trim point + 1 if all trimmed).
        """
        self._check_open()
        _check_log(log_id)
        trim = self._meta["trim"].get(log_id, 0)
        entries = sorted(
            (e.first_lsn, e.last_lsn, e.max_ts_ms, pid)
            for pid, e in self._dir.get(log_id, {}).items()
            if e.last_lsn > trim
        )
        for first, last, max_ts, pid in entries:
            if max_ts < ts_ms:
                continue
            part = self._partition_by_id(pid)
            lo = max(first, trim + 1)
            for key, value in self._engine.items(
                part.cf, fmt.data_key(log_id, lo), fmt.data_key(log_id, last) + b"\x00"
            ):
                if fmt.value_timestamp(value) >= ts_ms:
                    return int.from_bytes(key[8:], "big")
        top = max((e[1] for e in entries), default=0)
        return max(top, trim) + 1 if (top or trim) else LSN_OLDEST

    # -- metadata ---------------------------------------------------------

    def _raise_meta(self, kind: str, log_id: int, value: int, sync: bool) -> int:
        self._check_open()
        _check_log(log_id)
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
            _check_log(log_id)
            if type(lsn) is not int or not 0 <= lsn <= _U64_MAX:
                raise InvalidArgumentError(f"bad release LSN {lsn!r}")
            batch.put(META_CF, fmt.log_key("release", log_id), fmt.pack_u64(lsn))
        return moved

    def release_pointer(self, log_id: int) -> int:
        return self._meta["release"].get(log_id, 0)

    def last_lsn(self, log_id: int) -> int:
        """The highest LSN stored for the log (0 when none), trimmed or not."""
        return max((e.last_lsn for e in self._dir.get(log_id, {}).values()), default=0)

    def logs(self) -> list[int]:
        return sorted(log for log, entries in self._dir.items() if entries)

    def directory(self, log_id: int) -> list[tuple[int, DirEntry]]:
        """(partition id, entry) pairs of one log, oldest partition first."""
        return sorted(self._dir.get(log_id, {}).items())

    def partitions(self) -> list[PartitionInfo]:
        return [
            PartitionInfo(
                p.id, p.start_ts_ms, p.created_ms, p.bytes, len(self._logs_in.get(p.id, ()))
            )
            for p in self._partitions
        ]

    # -- space ------------------------------------------------------------

    def apply_retention(
        self, retention_ms: Mapping[int, int], *, now_ms: int | None = None
    ) -> dict[int, int]:
        """Trim each log's records older than its retention, at partition boundaries.

        Only whole directory entries move a trim point, and only the oldest
        ones in LSN order, so a trim never skips a record still in retention.
        Returns the logs whose trim point moved, with the new trim point.
        """
        self._check_open()
        now = self._clock_ms() if now_ms is None else now_ms
        newest = self._partitions[-1].id
        moved: dict[int, int] = {}
        for log_id, keep_ms in retention_ms.items():
            cutoff = now - keep_ms
            target = 0
            for first, pid, entry in sorted(
                (e.first_lsn, pid, e) for pid, e in self._dir.get(log_id, {}).items()
            ):
                if pid == newest or entry.max_ts_ms >= cutoff:
                    # Entries may overlap in LSNs (late records): never trim
                    # into an entry that must be kept.
                    target = min(target, first - 1)
                    break
                target = max(target, entry.last_lsn)
            if target > self.trim_point(log_id):
                moved[log_id] = self.trim(log_id, target)
        return moved

    def drop_partitions(self) -> list[int]:
        """Drop every partition (but the newest) whose records are all trimmed.

        Returns the ids of the dropped partitions.
        """
        self._check_open()
        trims = self._meta["trim"]
        dropped: list[int] = []
        for part in list(self._partitions[:-1]):
            logs = self._logs_in.get(part.id, set())
            if all(self._dir[log][part.id].last_lsn <= trims.get(log, 0) for log in logs):
                self._drop(part, logs)
                dropped.append(part.id)
        return dropped

    def _drop(self, part: _Partition, logs: set[int]) -> None:
        # Column family first, then the metadata: a crash between the two is
        # repaired on open (listed partition, missing column family).
        self._engine.drop_cf(part.cf)
        batch = self._engine.new_batch()
        batch.delete(META_CF, fmt.partition_key(part.id))
        for log in logs:
            batch.delete(META_CF, fmt.dir_key(log, part.id))
        self._engine.write(batch, sync=True)
        for log in logs:
            del self._dir[log][part.id]
        self._logs_in.pop(part.id, None)
        self._partitions.remove(part)

    def disk_bytes(self) -> int:
        return self._engine.disk_bytes()

    def flush(self) -> None:
        self._check_open()
        self._engine.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.close()

    def __enter__(self) -> LogsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_batch(
    lsns: Sequence[int],
    payloads: Sequence[bytes | None],
    *,
    timestamps_ms: Sequence[int] | int,
    keys: Sequence[bytes | None] | None = None,
    flags: Sequence[int] | int = 0,
) -> RecordBatch:
    """A RecordBatch from plain sequences; scalar timestamps and flags apply to all."""
    n = len(lsns)
    return RecordBatch(
        tuple(lsns),
        tuple(timestamps_ms) if not isinstance(timestamps_ms, int) else (timestamps_ms,) * n,
        tuple(flags) if not isinstance(flags, int) else (flags,) * n,
        tuple(keys) if keys is not None else (None,) * n,
        tuple(payloads),
    )

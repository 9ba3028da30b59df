"""The key-value engine under LogsDB: RocksDB through rocksdict.

LogsDB's logic (partitions, directory, trim, retention) talks to an engine
through this small interface, so that ``logstrand.testing`` can run the very
same logic on an in-memory engine.
"""

from __future__ import annotations

import contextlib
import gc
import os
from typing import TYPE_CHECKING, Protocol

import attrs
import rocksdict

from ..errors import UnreadableError

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY_MAX = b"\xff" * 17  # sorts after every data and metadata key
#: RocksDB's statistics tickers for the bytes it writes, by what ``IoBytes`` calls them.
_TICKERS = {
    "rocksdb.bytes.written": "user",
    "rocksdb.wal.bytes": "wal",
    "rocksdb.flush.write.bytes": "flush",
    "rocksdb.compact.write.bytes": "compaction",
    "rocksdb.blobdb.blob.file.bytes.written": "blob",
}
#: Levels a column family's SST files may be at (RocksDB's default num_levels).
_LEVELS = 7


@attrs.frozen
class IoBytes:
    """What an engine wrote since it opened: ``user`` bytes given to it
    (keys and values of its writes), and what went to disk for them: the
    write-ahead log, memtable flushes and compactions (both with the blob
    files they wrote; ``blob`` says how much of it went to blob files).
    Write amplification is what flushes and compactions wrote over
    ``user``: 1.0 when every byte is flushed once and never rewritten (the
    WAL is counted apart: it is written once per byte whatever the
    compaction)."""

    user: int = 0
    wal: int = 0
    flush: int = 0
    compaction: int = 0
    blob: int = 0

    @property
    def amplification(self) -> float:
        if self.user <= 0:
            return 0.0
        return (self.flush + self.compaction) / self.user


class Batch(Protocol):
    def put(self, cf: str, key: bytes, value: bytes) -> None: ...
    def put_many(self, cf: str, keys: list[bytes], values: list[bytes]) -> None: ...
    def delete(self, cf: str, key: bytes) -> None: ...


class Engine(Protocol):
    """What LogsDB needs from a sorted key-value store with column families."""

    def column_families(self) -> list[str]: ...
    def create_cf(self, name: str) -> None: ...
    def drop_cf(self, name: str) -> None: ...
    def new_batch(self) -> Batch: ...
    def write(self, batch: Batch, *, sync: bool) -> None: ...
    def get(self, cf: str, key: bytes) -> bytes | None: ...
    def items(self, cf: str, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Items with lo ≤ key < hi in key order.  Raises ``UnreadableError``
        (after the items before it) where a block cannot be read."""
        ...

    def first_key(self, cf: str, key: bytes, hi: bytes | None) -> bytes | None:
        """The first key ≥ ``key`` and < ``hi`` (None: none).  Raises
        ``UnreadableError`` when the block that would hold it cannot be read."""
        ...

    def last_before(self, cf: str, key: bytes, lo: bytes) -> tuple[bytes, bytes] | None: ...
    def cf_file_count(self, cf: str, *, level0: bool = False) -> int: ...
    def cf_file_bytes(self, cf: str) -> int: ...
    def disk_bytes(self) -> int: ...
    def io_bytes(self) -> IoBytes:
        """Bytes written since the engine opened, by kind (``IoBytes``)."""
        ...

    def background_work(self) -> bool: ...
    def flush(self) -> None: ...
    def flush_cf(self, name: str) -> None: ...
    def compact_range(self, cf: str, lo: bytes, hi: bytes) -> None: ...
    def close(self) -> None: ...


def _check(it: rocksdict.RdictIter, cf: str) -> None:
    """Raise ``UnreadableError`` if an iterator stopped on an error."""
    try:
        it.status()
    except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's message
        raise UnreadableError(f"partition {cf}: {exc}") from None


def _options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    # Records are written once, in key order per log, and read in order: a
    # larger memtable means fewer, larger L0 files per partition.
    opts.set_write_buffer_size(64 * 1024 * 1024)
    opts.set_max_background_jobs(2)
    # Its tickers count the bytes written by kind (``io_bytes``).
    opts.enable_statistics()
    return opts


#: L0 files past which RocksDB would slow or stop writes: never, in practice
#: (a partition rolls on its file count long before: ``partition_files_max``).
_L0_FILES_NO_STALL = 1 << 20


def _cf_options(blob_min_bytes: int | None) -> rocksdict.Options:
    """A partition's options.

    Records are written once, in time order, and never updated: a partition
    is left as its flushes wrote it (no automatic compaction, so no byte is
    rewritten by merging levels), every SST file stays at level 0, and
    writes never stall on their number; the partition rolls on its file
    count instead (``Partitions.maybe_roll``).  An explicit range compaction
    (a compacted log's dropped copies, ``compact_range``) still runs.

    With ``blob_min_bytes``, values at least that large go to blob files
    (RocksDB's BlobDB)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.set_disable_auto_compactions(True)
    opts.set_level_zero_slowdown_writes_trigger(_L0_FILES_NO_STALL)
    opts.set_level_zero_stop_writes_trigger(_L0_FILES_NO_STALL)
    opts.set_soft_pending_compaction_bytes_limit(0)  # 0: no limit
    opts.set_hard_pending_compaction_bytes_limit(0)
    if blob_min_bytes is not None:
        opts.set_enable_blob_files(True)
        opts.set_min_blob_size(blob_min_bytes)
        opts.set_enable_blob_gc(True)
    return opts


class _RocksBatch:
    __slots__ = ("_engine", "wb")

    def __init__(self, engine: RocksEngine) -> None:
        self._engine = engine
        self.wb = rocksdict.WriteBatch(raw_mode=True)

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self.wb.put(key, value, self._engine.handle(cf))

    def put_many(self, cf: str, keys: list[bytes], values: list[bytes]) -> None:
        handle = self._engine.handle(cf)
        put = self.wb.put
        for k, v in zip(keys, values, strict=True):
            put(k, v, handle)

    def delete(self, cf: str, key: bytes) -> None:
        self.wb.delete(key, self._engine.handle(cf))


class RocksEngine:
    """One RocksDB instance in a directory."""

    #: Whether reads ask RocksDB to verify its own checksums (``items``):
    #: no; ``bench/logsdb.py --big`` turns it on to measure what it costs.
    verify_reads = False

    def __init__(self, path: str | os.PathLike[str], *, blob_min_bytes: int | None = None) -> None:
        self.path = os.fspath(path)
        self._blob_min_bytes = blob_min_bytes
        existing: list[str] = []
        if os.path.exists(os.path.join(self.path, "CURRENT")):
            existing = [n for n in rocksdict.Rdict.list_cf(self.path, _options()) if n != "default"]
        #: The database's options: their statistics are the database's.
        self._opts = _options()
        self._db = rocksdict.Rdict(
            self.path,
            self._opts,
            column_families={n: _cf_options(blob_min_bytes) for n in existing},
        )
        self._cfs: dict[str, rocksdict.Rdict] = {}
        self._handles: dict[str, rocksdict.ColumnFamily] = {}
        for name in existing:
            self._attach(name)
        self._sync_opts = rocksdict.WriteOptions()
        self._sync_opts.sync = True
        self._async_opts = rocksdict.WriteOptions()

    def _attach(self, name: str) -> None:
        self._cfs[name] = self._db.get_column_family(name)
        self._handles[name] = self._db.get_column_family_handle(name)

    def handle(self, cf: str) -> rocksdict.ColumnFamily:
        return self._handles[cf]

    def column_families(self) -> list[str]:
        return list(self._cfs)

    def create_cf(self, name: str) -> None:
        self._db.create_column_family(name, _cf_options(self._blob_min_bytes))
        self._attach(name)

    def drop_cf(self, name: str) -> None:
        # Release our references first: RocksDB deletes a dropped column
        # family's files only when no handle to it is left.
        cf = self._cfs.pop(name)
        self._handles.pop(name)
        cf.close()
        del cf
        self._db.drop_column_family(name)

    def new_batch(self) -> _RocksBatch:
        return _RocksBatch(self)

    def write(self, batch: Batch, *, sync: bool) -> None:
        assert isinstance(batch, _RocksBatch)
        self._db.write(batch.wb, self._sync_opts if sync else self._async_opts)

    def get(self, cf: str, key: bytes) -> bytes | None:
        value = self._cfs[cf].get(key)
        assert value is None or isinstance(value, bytes)
        return value

    def items(self, cf: str, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        # A generator, so that its frame keeps the ReadOptions alive as long as
        # the iterator: RocksDB holds a pointer to the upper bound, and letting
        # the options go early makes iteration stop at a random key.
        # rocksdict's own items() ends quietly at a block that fails RocksDB's
        # checksum; the iterator's status tells a corrupt block from the end.
        ro = rocksdict.ReadOptions()
        ro.set_iterate_upper_bound(hi if hi is not None else KEY_MAX)
        # Every value is a batch with its own header and body CRC32C, both
        # checked on every read (``_scan.parse_value``), and its key is
        # checked against its header: RocksDB's own checksums check the same
        # bytes again, and cost about two thirds of a read of big batches
        # (``bench/logsdb.py --big``).  A block that does not decode still
        # fails the iterator (``_check``).
        ro.set_verify_checksums(self.verify_reads)
        it = self._cfs[cf].iter(ro)
        it.seek(lo)
        while it.valid():
            yield it.key(), it.value()
            it.next()
        _check(it, cf)

    def first_key(self, cf: str, key: bytes, hi: bytes | None) -> bytes | None:
        ro = rocksdict.ReadOptions()
        ro.set_iterate_upper_bound(hi if hi is not None else KEY_MAX)
        it = self._cfs[cf].iter(ro)
        it.seek(key)
        if it.valid():
            k: bytes = it.key()
            return k
        _check(it, cf)
        return None

    def last_before(self, cf: str, key: bytes, lo: bytes) -> tuple[bytes, bytes] | None:
        """The last item with lo ≤ its key ≤ key (RocksDB's seek-for-prev)."""
        it = self._cfs[cf].iter()
        it.seek_for_prev(key)
        if not it.valid():
            _check(it, cf)
            return None
        k = it.key()
        if k < lo:
            return None
        return k, it.value()

    def cf_file_count(self, cf: str, *, level0: bool = False) -> int:
        """The partition's SST files, at every level (``level0``: at level 0
        only, those no merge has sorted yet: each may hold any key)."""
        prop = self._cfs[cf].property_int_value
        levels = 1 if level0 else _LEVELS
        return sum(int(prop(f"rocksdb.num-files-at-level{n}") or 0) for n in range(levels))

    def cf_file_bytes(self, cf: str) -> int:
        """Bytes of the partition's SST files."""
        return int(self._cfs[cf].property_int_value("rocksdb.total-sst-files-size") or 0)

    def io_bytes(self) -> IoBytes:
        counts = dict.fromkeys(_TICKERS.values(), 0)
        for line in (self._opts.get_statistics() or "").splitlines():
            name, _, rest = line.partition(" COUNT : ")
            kind = _TICKERS.get(name)
            if kind is not None and rest.strip().isdigit():
                counts[kind] = int(rest)
        return IoBytes(**counts)

    def background_work(self) -> bool:
        # Running only: a partition, never compacted automatically, may be
        # "pending" for good.
        prop = self._db.property_int_value
        running = (prop("rocksdb.num-running-compactions") or 0) + (
            prop("rocksdb.num-running-flushes") or 0
        )
        flushes = any(
            cf.property_int_value("rocksdb.mem-table-flush-pending") for cf in self._cfs.values()
        )
        return bool(running or flushes)

    def disk_bytes(self) -> int:
        total = 0
        for entry in os.scandir(self.path):
            # RocksDB deletes files as it compacts, between the listing and
            # the stat (the stateful fuzzer found the race: GetNodeStatus failed).
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file():
                    total += entry.stat().st_size
        return total

    def flush(self) -> None:
        for cf in self._cfs.values():
            cf.flush()
        self._db.flush()

    def flush_cf(self, name: str) -> None:
        self._cfs[name].flush()

    def compact_range(self, cf: str, lo: bytes, hi: bytes) -> None:
        """Compact a key range now: deleted keys' space comes back."""
        self._cfs[cf].compact_range(lo, hi)

    def close(self) -> None:
        # After a failed write (a full disk) RocksDB refuses to close cleanly
        # ("Writer has previous error"): the handles are let go all the same,
        # so that the directory can be opened again once there is space.
        errors = []
        for cf in self._cfs.values():
            try:
                cf.close()
            except Exception as exc:
                errors.append(exc)
        self._cfs.clear()
        self._handles.clear()
        try:
            self._db.close()
        except Exception as exc:
            errors.append(exc)
        del self._db
        gc.collect()  # rocksdict releases the database when its objects are freed
        if errors:
            raise OSError(f"closing {self.path}: {errors[0]}")

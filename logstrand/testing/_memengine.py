"""An in-memory engine for LogsDB: the same logic, no RocksDB.

``MemoryEngine`` keeps column families as sorted dicts.  ``close()`` keeps the
data, so a test can "reopen" a LogsDB on the same engine; ``crash()`` also
forgets every write that was not made with ``sync=True``, which is what a
kill -9 of the process may do to RocksDB's unsynced WAL tail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedDict

from ..errors import UnreadableError
from ..logsdb import IoBytes, LogsDB, LogsDBOptions
from ..logsdb._store import wall_clock_ms

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class _MemBatch:
    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: list[tuple[str, bytes, bytes | None]] = []

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self.ops.append((cf, key, value))

    def put_many(self, cf: str, keys: list[bytes], values: list[bytes]) -> None:
        self.ops.extend((cf, k, v) for k, v in zip(keys, values, strict=True))

    def delete(self, cf: str, key: bytes) -> None:
        self.ops.append((cf, key, None))


class MemoryEngine:
    """Sorted dicts per column family, with the durability of a synced WAL."""

    def __init__(self) -> None:
        self._cfs: dict[str, Any] = {}
        self._durable: dict[str, Any] = {}
        #: What changed since the last synced write, in order: replayed onto
        #: ``_durable`` at the next one (a copy of everything per synced
        #: write made the simulation of hundreds of logs quadratic).
        self._unsynced: list[tuple[str, bytes | None, bytes | None]] = []
        self.closed = False
        #: (cf, key) pairs that read as a corrupt block (as RocksDB's checksum
        #: failing): iterating onto one, or seeking to it, raises.
        self.unreadable: set[tuple[str, bytes]] = set()
        #: Bytes of keys and values written (``io_bytes``: nothing else is).
        self.user_bytes = 0

    def column_families(self) -> list[str]:
        return list(self._cfs)

    def create_cf(self, name: str) -> None:
        if name in self._cfs:
            raise ValueError(f"column family {name} exists")
        self._cfs[name] = SortedDict()
        self._unsynced.append((name, None, None))

    def drop_cf(self, name: str) -> None:
        del self._cfs[name]
        self._unsynced.append((name, None, b"drop"))

    def new_batch(self) -> _MemBatch:
        return _MemBatch()

    def write(self, batch: Any, *, sync: bool) -> None:
        assert isinstance(batch, _MemBatch)
        for cf, key, value in batch.ops:
            self.user_bytes += len(key) + len(value or b"")
            if value is None:
                self._cfs[cf].pop(key, None)
            else:
                self._cfs[cf][key] = value
        self._unsynced.extend(batch.ops)
        if sync:
            self._make_durable()

    def _make_durable(self) -> None:
        """A synced write makes every earlier write durable too (one WAL):
        ``_durable`` becomes what ``_cfs`` is."""
        durable = self._durable
        for cf, key, value in self._unsynced:
            if key is None:  # a column family made (value None) or dropped
                if value is None:
                    durable[cf] = SortedDict()
                else:
                    durable.pop(cf, None)
            elif value is None:
                durable[cf].pop(key, None)
            else:
                durable[cf][key] = value
        self._unsynced.clear()

    def get(self, cf: str, key: bytes) -> bytes | None:
        value = self._cfs[cf].get(key)
        return value if value is None else bytes(value)

    def items(self, cf: str, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        sd = self._cfs[cf]
        keys = list(sd.irange(lo, hi, inclusive=(True, False)))
        for k in keys:
            if (cf, k) in self.unreadable:
                raise UnreadableError(f"partition {cf}: key {k.hex()} unreadable")
            if k in sd:
                yield k, sd[k]

    def first_key(self, cf: str, key: bytes, hi: bytes | None) -> bytes | None:
        for k in self._cfs[cf].irange(key, hi, inclusive=(True, False)):
            if (cf, k) in self.unreadable:
                raise UnreadableError(f"partition {cf}: key {k.hex()} unreadable")
            return bytes(k)
        return None

    def last_before(self, cf: str, key: bytes, lo: bytes) -> tuple[bytes, bytes] | None:
        sd = self._cfs[cf]
        for k in sd.irange(lo, key, reverse=True):
            return k, bytes(sd[k])
        return None

    def cf_file_count(self, cf: str, *, level0: bool = False) -> int:
        return 0

    def cf_file_bytes(self, cf: str) -> int:
        return 0

    def background_work(self) -> bool:
        return False

    def io_bytes(self) -> IoBytes:
        return IoBytes(user=self.user_bytes)

    def disk_bytes(self) -> int:
        return sum(len(k) + len(v) for sd in self._cfs.values() for k, v in sd.items())

    def flush(self) -> None:
        self._make_durable()

    def flush_cf(self, name: str) -> None:
        """Nothing: only synced writes survive ``crash()`` here (the cautious view)."""

    def compact_range(self, cf: str, lo: bytes, hi: bytes) -> None:
        """Nothing: deleted keys take no space here."""

    def close(self) -> None:
        self.closed = True

    def crash(self) -> None:
        """Forget every write not yet made durable (a kill -9 with no sync)."""
        self._cfs = {name: SortedDict(sd) for name, sd in self._durable.items()}
        self._unsynced.clear()
        # Column families are created and dropped durably at once in RocksDB.
        self.closed = True


def memory_logsdb(
    engine: MemoryEngine | None = None,
    options: LogsDBOptions | None = None,
    *,
    clock_ms: Callable[[], int] = wall_clock_ms,
) -> LogsDB:
    """A LogsDB on an in-memory engine (a new one unless ``engine`` is given)."""
    return LogsDB(engine if engine is not None else MemoryEngine(), options, clock_ms=clock_ms)

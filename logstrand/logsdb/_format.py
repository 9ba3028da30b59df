"""On-disk formats of LogsDB: keys, record values, metadata values.

Metadata keys (in the ``meta`` column family) start with a one-byte prefix
from ``META_PREFIXES``; a test keeps the prefixes unique.

Data keys are ``log_id u64 BE | first lsn u64 BE`` and each value is one
*packed batch* (``logstrand.batch``): the run of records of one STORE under
one copyset and wave, exactly the bytes the sequencer sent, with its header
and body checksums.  Stored batches of one log never overlap in LSNs.

Format 1 (one value per record) is refused at open: format 2 is not a
superset of it.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import attrs

from ..batch import make_batch
from ..records import FLAGS_PUBLIC_MASK

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..batch import PackedBatch

DATA_KEY = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")

# name -> prefix byte of every metadata key
META_PREFIXES: Final = {
    "partition": b"P",  # P | pid            -> start_ts_ms, created_ms
    "directory": b"D",  # D | log | pid      -> DirEntry
    "trim": b"T",  # T | log               -> trim point LSN
    "seal": b"S",  # S | log               -> sealed epoch
    "lce": b"C",  # C | log                -> last clean epoch
    "release": b"R",  # R | log            -> release pointer LSN
    "clean": b"K",  # K | log              -> compaction clean point LSN
    "floor": b"F",  # F | log              -> local floor: copies at or below are tiered
    "producer": b"Q",  # Q | log | producer -> its last batches (idempotence._stored)
    "version": b"V",  # V                  -> format version
}
FORMAT_VERSION: Final = 2

_PARTITION_VALUE = struct.Struct(">QQ")
_DIR_KEY = struct.Struct(">cQQ")
_LOG_KEY = struct.Struct(">cQ")
_DIR_VALUE = struct.Struct(">QQQQQQQ")
#: A directory entry written before ``written_ms`` was kept.
_DIR_VALUE_OLD = struct.Struct(">QQQQQQ")


class StoredRecord(NamedTuple):
    """One record copy as LogsDB holds it."""

    lsn: int
    timestamp_ms: int
    flags: int
    wave: int
    copyset: tuple[int, ...]
    key: bytes | None
    payload: bytes | None  # None for a tombstone
    #: Headers and a create time (``batch.pack_extra``), or None.
    extra: bytes | None = None


class DirEntry(NamedTuple):
    """What one partition holds of one log."""

    first_lsn: int
    last_lsn: int
    min_ts_ms: int
    max_ts_ms: int
    bytes: int
    records: int
    #: The last time this node wrote a record into the entry, by its own
    #: clock (0: not known, an entry written by an older version).
    #: Retention ages a record from the later of this and its timestamp.
    written_ms: int = 0


def data_key(log_id: int, lsn: int) -> bytes:
    return DATA_KEY.pack(log_id, lsn)


def log_key(kind: str, log_id: int) -> bytes:
    return _LOG_KEY.pack(META_PREFIXES[kind], log_id)


def dir_key(log_id: int, partition_id: int) -> bytes:
    return _DIR_KEY.pack(b"D", log_id, partition_id)


def parse_dir_key(key: bytes) -> tuple[int, int]:
    _, log_id, pid = _DIR_KEY.unpack(key)
    return log_id, pid


def partition_key(partition_id: int) -> bytes:
    return b"P" + _U64.pack(partition_id)


def pack_partition(start_ts_ms: int, created_ms: int) -> bytes:
    return _PARTITION_VALUE.pack(start_ts_ms, created_ms)


def unpack_partition(value: bytes) -> tuple[int, int]:
    start, created = _PARTITION_VALUE.unpack(value)
    return start, created


def pack_dir(entry: DirEntry) -> bytes:
    return _DIR_VALUE.pack(*entry)


def unpack_dir(value: bytes) -> DirEntry:
    if len(value) == _DIR_VALUE_OLD.size:
        return DirEntry(*_DIR_VALUE_OLD.unpack(value))
    return DirEntry(*_DIR_VALUE.unpack(value))


def pack_u64(value: int) -> bytes:
    return _U64.pack(value)


def unpack_u64(value: bytes) -> int:
    return int(_U64.unpack(value)[0])


@attrs.define(slots=True)
class StoredBatch:
    """Records of one log as columns: what one read of LogsDB returns."""

    log_id: int
    lsns: list[int] = attrs.Factory(list)
    timestamps_ms: list[int] = attrs.Factory(list)
    flags: list[int] = attrs.Factory(list)
    waves: list[int] = attrs.Factory(list)
    copysets: list[tuple[int, ...]] = attrs.Factory(list)
    keys: list[bytes | None] = attrs.Factory(list)
    payloads: list[bytes | None] = attrs.Factory(list)
    #: Every record's extras (``batch.pack_extra``), or None.
    extras: list[bytes | None] = attrs.Factory(list)
    #: Sum of payload lengths.
    payload_bytes: int = 0
    #: Every record up to this LSN was looked at (returned, or skipped by the
    #: reader's ``skip``): the next read goes on from here + 1.
    scanned_to: int = 0
    #: The public flags of every record here, OR-ed (a test for "any hole?",
    #: "any recovery copy?" without a pass over the records).
    flag_bits: int = 0

    def __len__(self) -> int:
        return len(self.lsns)

    def add(self, pb: PackedBatch, lo: int, hi: int) -> None:
        """Append the records of ``pb`` with lo ≤ LSN ≤ hi."""
        lsns = pb.lsns()
        a = bisect.bisect_left(lsns, lo)
        b = bisect.bisect_right(lsns, hi)
        if a >= b:
            return
        keys, pays = pb.keys_payloads()
        flags = pb.flags()[a:b]
        bits = pb.flag_bits
        if bits & ~FLAGS_PUBLIC_MASK:
            flags = [f & FLAGS_PUBLIC_MASK for f in flags]
        self.lsns += lsns[a:b]
        self.timestamps_ms += pb.timestamps()[a:b]
        self.flags += flags
        self.waves += [pb.wave] * (b - a)
        self.copysets += [pb.copyset] * (b - a)
        self.keys += keys[a:b]
        self.payloads += pays[a:b]
        extras = pb.extras()
        self.extras += [None] * (b - a) if extras is None else extras[a:b]
        self.payload_bytes += sum(map(len, filter(None, pays[a:b])))
        self.flag_bits |= bits & FLAGS_PUBLIC_MASK

    def cut(self, max_records: int, max_bytes: int) -> None:
        """Keep the records within the limits (at least one); ``scanned_to``
        then ends at the last one kept."""
        n = min(max_records, len(self.lsns))
        if self.payload_bytes >= max_bytes:
            sizes = itertools.accumulate(len(p) if p else 0 for p in self.payloads[:n])
            n = next((i + 1 for i, size in enumerate(sizes) if size >= max_bytes), n)
        if n < len(self.lsns):
            for col in self._columns():
                del col[n:]
            self.payload_bytes = sum(map(len, filter(None, self.payloads)))
        if self.lsns:
            self.scanned_to = self.lsns[-1]

    def to_packed(self) -> PackedBatch:
        """These records as one packed batch (without copysets and waves:
        what a digest carries).  At least one record."""
        return make_batch(
            self.lsns,
            self.payloads,
            timestamps_ms=self.timestamps_ms,
            keys=self.keys,
            flags=self.flags,
            extras=self.extras,
        )

    def _columns(self) -> tuple[list[Any], ...]:
        """The columns, in ``StoredRecord``'s field order."""
        return (
            self.lsns,
            self.timestamps_ms,
            self.flags,
            self.waves,
            self.copysets,
            self.keys,
            self.payloads,
            self.extras,
        )

    def records(self) -> Iterator[StoredRecord]:
        return map(StoredRecord, *self._columns())

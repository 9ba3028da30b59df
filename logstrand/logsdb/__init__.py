"""LogsDB: a node's local log store on time-ordered RocksDB partitions."""

from ._engine import Engine, RocksEngine
from ._format import (
    FLAG_BRIDGE,
    FLAG_HOLE,
    FLAG_TOMBSTONE,
    FLAG_WRITTEN_BY_RECOVERY,
    KEY_BYTES_MAX,
    META_PREFIXES,
    DirEntry,
    StoredBatch,
    StoredRecord,
)
from ._store import LogsDB, LogsDBOptions, PartitionInfo, PutBatch, make_batch

__all__ = [
    "FLAG_BRIDGE",
    "FLAG_HOLE",
    "FLAG_TOMBSTONE",
    "FLAG_WRITTEN_BY_RECOVERY",
    "KEY_BYTES_MAX",
    "META_PREFIXES",
    "DirEntry",
    "Engine",
    "LogsDB",
    "LogsDBOptions",
    "PartitionInfo",
    "PutBatch",
    "RocksEngine",
    "StoredBatch",
    "StoredRecord",
    "make_batch",
]

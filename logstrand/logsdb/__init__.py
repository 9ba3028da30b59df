"""LogsDB: a node's local log store on time-ordered RocksDB partitions."""

from ._engine import Engine, RocksEngine
from ._format import (
    META_PREFIXES,
    DirEntry,
    StoredBatch,
    StoredRecord,
)
from ._scan import PackedRead, Unreadable
from ._store import LogsDB, LogsDBOptions, PartitionInfo, PutBatch

__all__ = [
    "META_PREFIXES",
    "DirEntry",
    "Engine",
    "LogsDB",
    "LogsDBOptions",
    "PackedRead",
    "PartitionInfo",
    "PutBatch",
    "RocksEngine",
    "StoredBatch",
    "StoredRecord",
    "Unreadable",
]

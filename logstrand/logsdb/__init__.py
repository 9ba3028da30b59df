"""LogsDB: a node's local log store on time-ordered RocksDB partitions."""

from ._engine import Engine, IoBytes, RocksEngine
from ._format import (
    META_PREFIXES,
    DirEntry,
    StoredBatch,
    StoredRecord,
)
from ._partitions import LogsDBOptions, PartitionInfo, PutBatch
from ._scan import PackedRead, Unreadable
from ._store import LogsDB

__all__ = [
    "META_PREFIXES",
    "DirEntry",
    "Engine",
    "IoBytes",
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

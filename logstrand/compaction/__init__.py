"""Kafka-style compaction of keyed logs: the offset map and the cleaner's
decisions (pure), and the cleaner itself (``_cleaner.py``, trio: a node
extension that works through the client library).  Each node's part of a
pass is ``logstrand.storage._drops``.  See docs/compaction.md."""

from ._core import Candidate, PassStats, choose, drops, order
from ._offset_map import (
    ENTRY_BYTES,
    MAP_BYTES_MIN,
    MapFullError,
    OffsetMap,
    hash_keys,
    map_bytes_for,
)

__all__ = [
    "ENTRY_BYTES",
    "MAP_BYTES_MIN",
    "Candidate",
    "MapFullError",
    "OffsetMap",
    "PassStats",
    "choose",
    "drops",
    "hash_keys",
    "map_bytes_for",
    "order",
]

"""Kafka-style compaction of keyed logs: the offset map and the cleaner's
decisions (pure).  The cleaner's I/O lives on the node
(``logstrand.storage._cleaner``).  See docs/compaction.md."""

from ._core import Candidate, PassStats, choose, drops
from ._offset_map import ENTRY_BYTES, MapFullError, OffsetMap, hash_keys

__all__ = [
    "ENTRY_BYTES",
    "Candidate",
    "MapFullError",
    "OffsetMap",
    "PassStats",
    "choose",
    "drops",
    "hash_keys",
]

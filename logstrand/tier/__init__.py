"""Tiered storage: old records of a log moved to an object store (an S3
API), read back through the nodes as if they were still there
(docs/tiered-storage.md).

* ``_format``: the object's layout, its index and checksums; pure.
* ``_segments``: what the epoch store records of a log's tiered objects
  (``TierState``: the tiered point and the segments below it); pure.
"""

from __future__ import annotations

from ._format import (
    BLOCK_BYTES,
    Batch,
    Block,
    Built,
    CorruptObject,
    Footer,
    GapEntry,
    build,
    entries_from,
    parse_block,
    parse_footer,
    parse_index,
)

__all__ = [
    "BLOCK_BYTES",
    "Batch",
    "Block",
    "Built",
    "CorruptObject",
    "Footer",
    "GapEntry",
    "build",
    "entries_from",
    "parse_block",
    "parse_footer",
    "parse_index",
]

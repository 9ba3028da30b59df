"""Tiered storage: old records of a log moved to an object store (an S3
API), read back through the nodes as if they were still there
(docs/tiered-storage.md).

* ``_format``: the object's layout, its index and checksums; pure.
* ``_objects``: the object store (an S3 API through obstore) and the reader
  that seeks in an object: its footer, its index, then the blocks from an
  LSN, with read-ahead.
* What is recorded of a log's objects is the epoch store's
  (``epochstore._tier_docs``): the tiered point and the segments below it.
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

"""Tiered storage: old records of a log moved to an object store (an S3
API), read back through the nodes as if they were still there
(docs/tiered-storage.md).

* ``_format``: the object's layout, its index and checksums; pure.
* ``_objects``: the object store (an S3 API through obstore) and the reader
  that seeks in an object: its footer, its index, then the blocks from an
  LSN, with read-ahead.
* ``_serve``: a node's answers to ``TierRead``, with a cache of blocks.
* ``_offload``: a node's rounds that upload the old records of the logs it
  owns and record them; ``_node``: ``Tiering``, the node extension.
* ``_steps``: the commands the offload's procedures (``_offload_core``)
  and a node's answers (``_answers``) yield; pure, and driven by the
  shells above (``_io`` performs the store calls) or by the simulation.
* What is recorded of a log's objects is the epoch store's
  (``epochstore._tier_docs``): the tiered point and the segments below it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
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

if TYPE_CHECKING:
    from ._node import Tiering, TierOptions
    from ._objects import ObjectStore, TierTarget

#: Loaded when first asked for: the node's parts bring trio and the client,
#: and the format alone is what tests and tools read objects with.
_WHERE = {
    "Tiering": "_node",
    "TierOptions": "_node",
    "ObjectStore": "_objects",
    "TierTarget": "_objects",
}


__getattr__ = lazy_names(__name__, _WHERE)


__all__ = [
    "BLOCK_BYTES",
    "Batch",
    "Block",
    "Built",
    "CorruptObject",
    "Footer",
    "GapEntry",
    "ObjectStore",
    "TierOptions",
    "TierTarget",
    "Tiering",
    "build",
    "entries_from",
    "parse_block",
    "parse_footer",
    "parse_index",
]

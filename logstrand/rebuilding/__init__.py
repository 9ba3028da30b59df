"""Rebuilding: re-creating the copies a lost (or drained) node held, many to
many, and the authoritative status of each node.

The model and the decisions are pure (``_model``, ``_core``); the node's
shell that walks its copies is ``logstrand.storage._rebuild``; the state
lives in the epoch store (``rebuilding`` document).  docs/rebuilding.md.
"""

from ._core import NewCopies, Start, leader, new_copies, on_start
from ._model import (
    Authority,
    DonorProgress,
    Mode,
    RebuildingState,
    Run,
    Shard,
    StorageState,
)

__all__ = [
    "Authority",
    "DonorProgress",
    "Mode",
    "NewCopies",
    "RebuildingState",
    "Run",
    "Shard",
    "Start",
    "StorageState",
    "leader",
    "new_copies",
    "on_start",
]

"""The epoch store: per-log epochs, cluster configuration, membership.

Two stores share one contract: ``ZooKeeperEpochStore`` (production) and
``SqliteEpochStore`` (one machine, no other service).  ``open_epoch_store(url)``
picks one from ``zk://host:port/cluster`` or ``sqlite:///path/cluster.db``.
"""

from typing import TYPE_CHECKING

from ..types import SegmentField
from ._base import EpochStore, Placement
from ._members import Member, Members, MemberSession, Watch, describe_offset
from ._model import (
    CLEANUP_POLICIES,
    COMPRESSIONS,
    DURABILITIES,
    SCOPES,
    EpochEnd,
    EpochMetadata,
    LogAttributes,
    LogEpochs,
    LogRange,
    NodeConfig,
)
from ._named import NamedCache, NamedLogs, named_logs
from ._url import open_epoch_store

if TYPE_CHECKING:
    from ._async import AsyncEpochStore
    from ._sqlite import SqliteEpochStore
    from ._zookeeper import ZooKeeperEpochStore

# Loaded when asked for: the backends pull in sqlite3 and kazoo, and
# AsyncEpochStore trio; code that only needs the models (the sequencer's pure
# procedures, the client's vocabulary) must stay free of them.
_LAZY = {
    "AsyncEpochStore": "._async",
    "SqliteEpochStore": "._sqlite",
    "ZooKeeperEpochStore": "._zookeeper",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLEANUP_POLICIES",
    "COMPRESSIONS",
    "DURABILITIES",
    "SCOPES",
    "AsyncEpochStore",
    "EpochEnd",
    "EpochMetadata",
    "EpochStore",
    "LogAttributes",
    "LogEpochs",
    "LogRange",
    "Member",
    "MemberSession",
    "Members",
    "NamedCache",
    "NamedLogs",
    "NodeConfig",
    "Placement",
    "SegmentField",
    "SqliteEpochStore",
    "Watch",
    "ZooKeeperEpochStore",
    "describe_offset",
    "named_logs",
    "open_epoch_store",
]

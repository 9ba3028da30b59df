"""The epoch store: per-log epochs, cluster configuration, membership.

Two stores share one contract: ``ZooKeeperEpochStore`` (production) and
``SqliteEpochStore`` (one machine, no other service).  ``open_epoch_store(url)``
picks one from ``zk://host:port/cluster`` or ``sqlite:///path/cluster.db``.
"""

from typing import TYPE_CHECKING

from ._base import EpochStore, MemberSession, Placement, Watch
from ._model import (
    CLEANUP_POLICIES,
    DURABILITIES,
    SCOPES,
    EpochEnd,
    EpochMetadata,
    LogAttributes,
    LogEpochs,
    LogRange,
    NodeConfig,
    parse_log_range,
)
from ._sqlite import SqliteEpochStore
from ._url import open_epoch_store
from ._zookeeper import ZooKeeperEpochStore

if TYPE_CHECKING:
    from ._async import AsyncEpochStore


def __getattr__(name: str) -> object:
    # AsyncEpochStore pulls in trio; the pure protocol code that uses this
    # package's models (the sequencer's procedures) must stay free of it.
    if name == "AsyncEpochStore":
        from ._async import AsyncEpochStore

        return AsyncEpochStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLEANUP_POLICIES",
    "DURABILITIES",
    "SCOPES",
    "AsyncEpochStore",
    "EpochEnd",
    "EpochMetadata",
    "EpochStore",
    "LogAttributes",
    "LogEpochs",
    "LogRange",
    "MemberSession",
    "NodeConfig",
    "Placement",
    "SqliteEpochStore",
    "Watch",
    "ZooKeeperEpochStore",
    "open_epoch_store",
    "parse_log_range",
]

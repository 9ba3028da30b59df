"""Public test helpers: in-memory twins and real servers for tests."""

from ._cluster import LocalCluster
from ._memengine import MemoryEngine, memory_logsdb
from ._memstore import MemoryEpochStore
from ._zookeeper import ZooKeeperServer, free_port, zookeeper_available

__all__ = [
    "LocalCluster",
    "MemoryEngine",
    "MemoryEpochStore",
    "ZooKeeperServer",
    "free_port",
    "memory_logsdb",
    "zookeeper_available",
]

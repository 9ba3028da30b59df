"""Public test helpers: in-memory twins and real servers for tests."""

from ._cluster import LocalCluster
from ._memengine import MemoryEngine, memory_logsdb
from ._memstore import MemoryEpochStore
from ._moto import MotoServer, moto_available
from ._netcluster import NetCluster
from ._netns import Network
from ._ports import free_port
from ._procs import cpu_s, rss_mb
from ._s3_faults import S3Faults
from ._zookeeper import ZooKeeperServer, zookeeper_available

__all__ = [
    "LocalCluster",
    "MemoryEngine",
    "MemoryEpochStore",
    "MotoServer",
    "NetCluster",
    "Network",
    "S3Faults",
    "ZooKeeperServer",
    "cpu_s",
    "free_port",
    "memory_logsdb",
    "moto_available",
    "rss_mb",
    "zookeeper_available",
]

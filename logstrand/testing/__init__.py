"""Public test helpers: in-memory twins and real servers for tests."""

from ._memengine import MemoryEngine, memory_logsdb
from ._zookeeper import ZooKeeperServer, free_port, zookeeper_available

__all__ = ["MemoryEngine", "ZooKeeperServer", "free_port", "memory_logsdb", "zookeeper_available"]

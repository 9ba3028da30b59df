"""Public test helpers: in-memory twins of logstrand's external parts."""

from ._memengine import MemoryEngine, memory_logsdb

__all__ = ["MemoryEngine", "memory_logsdb"]

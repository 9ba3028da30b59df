"""What a LogsDB tells of its engine: disk use, the bytes it wrote by kind,
background work, SST files.  For status, metrics and benchmarks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._engine import Engine, IoBytes
    from ._partitions import Partitions


class EngineFacts:
    """A base of ``LogsDB``: these read its engine and partitions only."""

    _engine: Engine
    _parts: Partitions

    def disk_bytes(self) -> int:
        return self._engine.disk_bytes()

    def io_bytes(self) -> IoBytes:
        """Bytes written since the LogsDB opened, by kind (``IoBytes``)."""
        return self._engine.io_bytes()

    def background_work(self) -> bool:
        """Whether the engine flushes or compacts in the background now."""
        return self._engine.background_work()

    def sst_files(self) -> int:
        """SST files of every partition."""
        return sum(self._engine.cf_file_count(p.cf) for p in self._parts.list)

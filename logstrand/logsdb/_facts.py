"""What a LogsDB tells of its engine: disk use, the bytes it wrote by kind,
background work, SST files.  For status, metrics and benchmarks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._engine import KEY_MAX

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

    def small_file_partitions(self) -> list[str]:
        """The column families of partitions to merge (``LogsDBOptions.
        merge_files_min``): not the newest, with many unmerged (level 0)
        files, small ones.  A merged partition's files are one sorted run
        (a read seeks in one of them), so it is not a candidate again."""
        opts, engine = self._parts.options, self._engine
        out = []
        for part in self._parts.list[:-1]:
            if engine.cf_file_count(part.cf, level0=True) > opts.merge_files_min:
                files = engine.cf_file_count(part.cf)
                if engine.cf_file_bytes(part.cf) < files * opts.merge_file_bytes:
                    out.append(part.cf)
        return out

    def merge_partitions(self, cfs: list[str]) -> None:
        """Merge each partition's files into one sorted run (a read then seeks
        in one file; files whose keys do not overlap are moved, not
        rewritten).  RocksDB's compaction releases the GIL and touches no
        LogsDB state: any thread may call this."""
        for cf in cfs:
            self._engine.compact_range(cf, b"", KEY_MAX)

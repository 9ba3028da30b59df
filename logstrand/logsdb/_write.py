"""One write of LogsDB being built: stored batches put as they are, or split
around a batch that overlaps them, with the directory entries they change.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from ..batch import TIMESTAMPS
from . import _format as fmt
from . import _scan
from ._format import DirEntry
from ._partitions import merge_entry

if TYPE_CHECKING:
    from ..batch import PackedBatch
    from ._engine import Engine
    from ._partitions import Partitions


class Write:
    """One RocksDB write of LogsDB being built: the batch, the directory
    entries it changes, and the bytes it adds per partition."""

    def __init__(self, parts: Partitions, engine: Engine) -> None:
        self.parts = parts
        self.engine = engine
        self.batch = engine.new_batch()
        self.touched: dict[tuple[int, int], DirEntry] = {}
        self.part_bytes: dict[int, int] = {}
        self.deleted = False
        #: When this write happens, by this node's clock (directory entries keep it).
        self.written_ms = parts.clock_ms()
        #: Per log, the highest LSN put in this write, and the ranges put.
        self.top: dict[int, int] = {}
        self._ranges: dict[int, list[tuple[int, int]]] = {}

    @property
    def empty(self) -> bool:
        """Nothing put or deleted (an amend puts without touching the directory)."""
        return not self._ranges and not self.deleted

    def overlaps_pending(self, log_id: int, pb: PackedBatch) -> bool:
        return any(a <= pb.last_lsn and pb.first_lsn <= b for a, b in self._ranges.get(log_id, ()))

    def put(self, log_id: int, pid: int, pb: PackedBatch, *, account: bool = True) -> None:
        """Put a batch; ``account``: its records are new to the directory."""
        parts = self.parts
        self.batch.put(parts.by_id(pid).cf, fmt.data_key(log_id, pb.first_lsn), pb.data)
        self._ranges.setdefault(log_id, []).append((pb.first_lsn, pb.last_lsn))
        self.top[log_id] = max(self.top.get(log_id, 0), pb.last_lsn)
        if not account:
            return
        size = len(pb.data) + 16
        ts = pb.timestamps() if pb.layout & TIMESTAMPS else (pb.timestamp_ms,)
        entry = DirEntry(
            pb.first_lsn, pb.last_lsn, min(ts), max(ts), size, pb.count, self.written_ms
        )
        k = (log_id, pid)
        old = self.touched.get(k) or parts.dir.get(log_id, {}).get(pid)
        self.touched[k] = merge_entry(old, entry)
        self.part_bytes[pid] = self.part_bytes.get(pid, 0) + size

    def delete(self, pid: int, key: bytes) -> None:
        self.batch.delete(self.parts.by_id(pid).cf, key)
        self.deleted = True

    def shrink(self, log_id: int, pid: int, records: int, nbytes: int) -> None:
        """The log's entry in partition ``pid`` holds ``records`` records and
        ``nbytes`` bytes fewer (copies removed by compaction).  Its range
        stays: readers and retention need where the log was, not what is left.
        Without this, a log's size would never shrink, and its dirty ratio,
        measured against it, would stay high after a pass to the tail."""
        k = (log_id, pid)
        old = self.touched.get(k) or self.parts.dir.get(log_id, {}).get(pid)
        if old is None:
            return
        self.touched[k] = old._replace(
            bytes=max(0, old.bytes - nbytes), records=max(0, old.records - records)
        )

    def replace(self, log_id: int, pb: PackedBatch) -> None:
        """Put ``pb`` over stored batches it overlaps: split them around it."""
        found = _scan.stored(self.parts, self.engine, log_id, pb.first_lsn, pb.last_lsn)
        olds = [(pid, o) for pid, o in found if o.first_lsn <= pb.last_lsn]
        if not olds:
            self.put(log_id, self.parts.partition_for(pb.timestamp_ms).id, pb)
            return
        new_lsns = pb.lsns()
        taken = set(new_lsns)
        # (lsn, source, index): source 0 is the new batch, k > 0 the k-th old one.
        merged = [(lsn, 0, i) for i, lsn in enumerate(new_lsns)]
        for k, (pid, old) in enumerate(olds, 1):
            self.delete(pid, fmt.data_key(log_id, old.first_lsn))
            merged += [(x, k, i) for i, x in enumerate(old.lsns()) if x not in taken]
        merged.sort()
        # A rewrite goes where the copies it replaces are.
        new_pid = olds[0][0]
        for source, group in itertools.groupby(merged, key=lambda t: t[1]):
            idxs = [i for _, _, i in group]
            src = pb if source == 0 else olds[source - 1][1]
            pid = new_pid if source == 0 else olds[source - 1][0]
            piece = src if len(idxs) == src.count else src.select(idxs)
            self.put(log_id, pid, piece, account=source == 0)


def amend(
    w: Write,
    log_id: int,
    first: int,
    last: int,
    old: tuple[int, ...],
    new: tuple[int, ...],
) -> int:
    """Re-header the stored batches of ``log_id`` overlapping [first, last]
    whose copyset is ``old`` with ``new``, in place (same key, same size to a
    few bytes: the directory is left as it is).  Returns how many changed."""
    changed = 0
    for pid, pb in _scan.stored(w.parts, w.engine, log_id, first, last):
        if pb.first_lsn > last or pb.copyset != old:
            continue
        w.put(log_id, pid, pb.reheader(copyset=new), account=False)
        changed += 1
    return changed

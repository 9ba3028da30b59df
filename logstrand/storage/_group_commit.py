"""The committer: the one owner of a node's LogsDB.

Rules
-----
1. Every call into LogsDB is made here, on the event loop's thread (LogsDB
   asserts it).  rocksdict holds the GIL for a write or a read, so a worker
   thread would not keep the loop running anyway, and the hand-off costs more
   than a small write.  The one exception is reclaiming space after
   compaction: RocksDB's flush and range compaction release the GIL and touch
   no state of LogsDB, so they run in a worker thread (``reclaim``).
2. Group commit: STOREs from all connections and from this node's own
   sequencers go into one bounded queue; the committer takes everything
   waiting (up to ``group_commit_records_max`` records or
   ``group_commit_bytes_max`` bytes), writes it in one RocksDB write, and
   answers each STORE.  Under load one fsync covers hundreds of STOREs, and
   the size limits bound the pause a write is for the loop.  The answers of
   one write to one connection that speaks protocol 6 leave as one
   ``StoreReplies``.
3. What a STORE, a RELEASE, a trim or a recovery's question means for the
   LogsDB is decided by the node's request rules (``_node_store.NodeStore``,
   pure, which the simulation runs too); the committer adds the queue, the
   release pointers' persistence (at least every ``release_persist_s`` and at
   close), and reopening the LogsDB after a full disk (``--min-free``).

Everything else a node asks of its LogsDB goes through here too: the answers
to recovery (log info, seals, digests), trims, find-time, the partition
directory, reads for read streams, compaction's removals, retention.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _trace
from ..logsdb import LogsDB
from ..wire import MANY_MAX, Store, StoreReplies
from ._node_store import NodeStore, _no_space

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..logsdb import LogsDBOptions
    from ..wire import StoreReply

    #: Takes a STORE's reply without waiting (``Connection.offer``): a peer that
    #: does not read its replies must never hold up the group commit.
    Sink = Callable[[StoreReply | StoreReplies], object]

_log = logging.getLogger("logstrand.node")


@attrs.define(eq=False, kw_only=True)
class Committer(NodeStore):
    """The owner of one node's LogsDB (see the module docstring)."""

    queue_max: int
    records_max: int
    bytes_max: int
    release_persist_s: float
    _where: tuple[str, LogsDBOptions | None] = attrs.field(init=False, default=("", None))
    _in: trio.MemorySendChannel[tuple[Store, Any, bool]] = attrs.field(init=False)
    _out: trio.MemoryReceiveChannel[tuple[Store, Any, bool]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._in, self._out = trio.open_memory_channel[tuple[Store, Any, bool]](self.queue_max)

    # -- lifecycle ----------------------------------------------------------------

    def open(self, data_dir: str, options: LogsDBOptions | None) -> None:
        """Open the LogsDB on this (the event loop's) thread; it belongs to it."""
        self.attach(LogsDB.open(data_dir, options, clock_ms=self.clock.now_ms))
        self._where = (data_dir, options)

    def reopen(self) -> None:
        """Open the LogsDB afresh after a write failed for want of space.
        Release pointers learned meanwhile are kept (they are newer).

        Raises:
            Exception: the open failed (still no space): try again later.
        """
        if self._db is not None and not self._db.closed:
            try:
                self._db.close()
            except Exception as exc:  # expected after the failed write
                _log.info("node %d: closing the broken LogsDB: %s", self.node_id, exc)
        self._db = None
        self._db = LogsDB.open(*self._where, clock_ms=self.clock.now_ms)
        for log in self._db.logs():
            stored = self._db.release_pointer(log)
            if stored > self.release.get(log, 0):
                self.release[log] = stored
        self.undirty(self.release)
        self.broken = False
        _log.warning("node %d: LogsDB reopened; STOREs are taken again", self.node_id)

    def close(self) -> None:
        if self._db is not None and not self._db.closed:
            self._persist_releases(dict(self.release), sync=True)
            self._db.close()

    # -- storing -------------------------------------------------------------------

    async def submit(self, msg: Store, sink: Sink, many: bool = False) -> None:
        """Queue a STORE; ``sink`` gets its reply (with ``many``, in a
        ``StoreReplies`` with the others of its write to the same sink).
        Waits while the queue is full."""
        try:
            # Not ``send``, which always yields: a StoreMany's entries, or
            # the local copies of an AppendMany's entries, queue in one pass
            # and go in one write.  (Yielding per entry let the committer
            # wake for each and write 3 to 4 copies at a time.)
            self._in.send_nowait((msg, sink, many))
        except trio.WouldBlock:
            await self._in.send((msg, sink, many))

    async def run(self) -> None:
        """Group commit, until cancelled."""
        async for first in self._out:
            # Let the tasks woken with this one run first: the connection
            # writers carrying a sequencer's STOREs to its peers leave before
            # this node's own copy takes the loop for a RocksDB write, and
            # STOREs that came in the same round join the group.
            await trio.lowlevel.checkpoint()
            items = [first]
            records = len(first[0].batch)
            size = first[0].batch.payload_bytes
            while records < self.records_max and size < self.bytes_max:
                try:
                    item = self._out.receive_nowait()
                except trio.WouldBlock:
                    break
                items.append(item)
                records += len(item[0].batch)
                size += item[0].batch.payload_bytes
            if _trace.ON:
                _trace.mark("store.write")
            replies = self.commit([msg for msg, _, _ in items])
            if _trace.ON:
                _trace.mark("store.written")
            self._answer_all(items, replies)

    def _answer_all(self, items: list[tuple[Store, Any, bool]], replies: list[StoreReply]) -> None:
        # If a sequencer's connection is gone, it will retry elsewhere.
        together: dict[Any, list[StoreReply]] = {}
        for (_, sink, many), reply in zip(items, replies, strict=True):
            if not many:
                sink(reply)
                continue
            got = together.get(sink)
            if got is None:
                together[sink] = [reply]
            else:
                got.append(reply)
        for sink, some in together.items():
            if len(some) == 1:
                sink(some[0])
                continue
            for lo in range(0, len(some), MANY_MAX):
                sink(StoreReplies.of(self.node_id, some[lo : lo + MANY_MAX]))

    # -- release pointers ---------------------------------------------------------

    def _persist_releases(self, releases: Mapping[int, int], sync: bool = False) -> None:
        if releases:
            self.db.set_releases(releases, sync=sync)

    async def persist_releases(self) -> None:
        """Persist moved release pointers now and then, until cancelled."""
        while True:
            await trio.sleep(self.release_persist_s)
            if not self.broken:
                dirty = self.dirty_releases()
                try:
                    self._persist_releases(dirty)
                except Exception as exc:
                    self.undirty(dirty)  # tried again next time
                    self.broken = self.broken or _no_space(exc)
                    raise

    # -- compaction's space -----------------------------------------------------------

    async def reclaim(self, log_id: int) -> None:
        """Make removals durable and give their space back (rule 1's exception)."""
        ranges = self.db.reclaim_ranges(log_id)
        await trio.to_thread.run_sync(functools.partial(self.db.compact_ranges, ranges))

    async def merge_small_files(self) -> None:
        """Merge old partitions of many small files (``LogsDB.merge_partitions``),
        in a worker thread: RocksDB's compaction there takes no LogsDB state."""
        db = self._db
        if db is None or db.closed:
            return
        cfs = db.small_file_partitions()
        if cfs:
            _log.info("node %d: merging the small files of partitions %s", self.node_id, cfs)
            await trio.to_thread.run_sync(db.merge_partitions, cfs)
            self.metrics.partitions_merged.inc(len(cfs))

"""The epoch store from trio: typed, and every call in a worker thread.

Both stores block (kazoo waits on ZooKeeper, sqlite3 on the file lock), so
trio code never calls them directly.  A capacity limiter bounds how many
threads wait on the store at once.  Each method is the store's method of the
same name (see ``EpochStore`` for what it does and raises).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._base import EpochStore, Placement
    from ._members import Members, Watch
    from ._model import EpochEnd, EpochMetadata, LogAttributes, LogEpochs, LogRange, NodeConfig

R = TypeVar("R")


class _Call:
    __slots__ = ("done", "fn", "ok", "value")

    def __init__(self, fn: Callable[[EpochStore], Any]) -> None:
        self.fn = fn
        self.done = False
        self.ok = False
        self.value: Any = None


class _Groups:
    """Calls that wait now go together in one worker-thread hop (``grouped``)."""

    def __init__(
        self,
        run: Callable[[list[Callable[[EpochStore], Any]]], list[tuple[bool, Any]]],
        limiter: trio.CapacityLimiter,
    ) -> None:
        self._run = run
        self._limiter = limiter
        self._queue: list[_Call] = []
        self._leading = False
        self._turn = trio.Event()

    async def call(self, fn: Callable[[EpochStore], Any]) -> Any:
        call = _Call(fn)
        self._queue.append(call)
        while not call.done:
            if self._leading:
                await self._turn.wait()
                continue
            self._leading = True
            group, self._queue = self._queue, []
            try:
                # Not abandoned on cancel: the group's results must reach its callers.
                outcomes = await trio.to_thread.run_sync(
                    functools.partial(self._run, [c.fn for c in group]),
                    limiter=self._limiter,
                )
                for c, (ok, value) in zip(group, outcomes, strict=True):
                    c.ok, c.value, c.done = ok, value, True
            finally:
                self._queue[:0] = [c for c in group if not c.done]  # cancelled before it ran
                self._leading = False
                turn, self._turn = self._turn, trio.Event()
                turn.set()
        if not call.ok:
            raise call.value
        return call.value


class AsyncEpochStore:
    def __init__(self, store: EpochStore, *, threads_max: int = 8) -> None:
        self.store = store
        self.cluster = store.cluster
        self._limiter = trio.CapacityLimiter(threads_max)
        #: ``grouped`` calls that may write, and those that only read.
        self._writes = _Groups(lambda fns: self.store.calls(fns), self._limiter)
        self._reads = _Groups(lambda fns: self.store.read_calls(fns), self._limiter)

    async def grouped(self, fn: Callable[[EpochStore], R], *, read_only: bool = False) -> R:
        """``fn(store)`` in a worker thread together with the other grouped
        calls waiting now: one thread hop, and on SQLite one transaction and
        one fsync, for a burst of activations (``EpochStore.calls``).  For
        short calls only: each waits for the whole group.

        ``read_only``: ``fn`` only reads, and goes with the other readers
        (``EpochStore.read_calls``): on SQLite a WAL reader, which neither
        takes nor waits for the write lock the activations' groups hold."""
        groups = self._reads if read_only else self._writes
        result: R = await groups.call(fn)
        return result

    async def run(self, fn: Callable[[EpochStore], R]) -> R:
        """``fn(store)`` in a worker thread (the sequencer's procedures ask
        the store this way: ``EpochStoreCall``)."""
        return await trio.to_thread.run_sync(
            functools.partial(fn, self.store), limiter=self._limiter, abandon_on_cancel=True
        )

    async def _call(self, fn: Callable[..., R], *args: Any) -> R:
        return await trio.to_thread.run_sync(
            functools.partial(fn, *args), limiter=self._limiter, abandon_on_cancel=True
        )

    # -- epochs ---------------------------------------------------------------

    async def take_epoch(self, log_id: int, placement: Placement) -> tuple[int, EpochMetadata]:
        return await self._call(self.store.take_epoch, log_id, placement)

    async def log_epochs(self, log_id: int) -> LogEpochs:
        return await self._call(self.store.log_epochs, log_id)

    async def log_epochs_many(self, log_ids: list[int]) -> dict[int, LogEpochs]:
        return await self._call(self.store.log_epochs_many, log_ids)

    async def last_clean_epoch(self, log_id: int) -> int:
        return await self._call(self.store.last_clean_epoch, log_id)

    async def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None:
        return await self._call(self.store.epoch_end, log_id, epoch)

    # -- trim and compaction ------------------------------------------------------

    async def trim_point(self, log_id: int) -> int:
        return await self._call(self.store.trim_point, log_id)

    async def trim_points(self, log_ids: list[int]) -> dict[int, int]:
        return await self._call(self.store.trim_points, log_ids)

    async def set_trim_point(self, log_id: int, lsn: int) -> int:
        return await self._call(self.store.set_trim_point, log_id, lsn)

    async def trims_changed(self, since: int) -> tuple[int, list[int] | None]:
        return await self._call(self.store.trims_changed, since)

    async def compaction(self, log_id: int) -> dict[str, Any] | None:
        return await self._call(self.store.compaction, log_id)

    async def record_compaction(
        self, log_id: int, clean_point: int, clean_bytes: int, last_pass: dict[str, Any]
    ) -> dict[str, Any]:
        return await self._call(
            self.store.record_compaction, log_id, clean_point, clean_bytes, last_pass
        )

    # -- configuration and membership ---------------------------------------------

    async def nodes(self) -> dict[int, NodeConfig]:
        return await self._call(self.store.nodes)

    async def log_ranges(self) -> list[LogRange]:
        return await self._call(self.store.log_ranges)

    async def log_attributes(self, log_id: int) -> LogAttributes:
        return await self._call(self.store.log_attributes, log_id)

    async def security(self) -> dict[str, Any]:
        return await self._call(self.store.security)

    async def alive_nodes(self) -> frozenset[int]:
        return await self._call(self.store.alive_nodes)

    async def members(self) -> Members:
        return await self._call(self.store.members)

    async def watch_members(self, callback: Callable[[Members], None]) -> Watch:
        return await self._call(self.store.watch_members, callback)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.store.close)

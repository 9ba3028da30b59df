"""The epoch store from trio: every call runs in a worker thread.

Both stores block (kazoo waits on ZooKeeper, sqlite3 on the file lock), so
trio code never calls them directly.  A capacity limiter bounds how many
threads wait on the store at once.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._base import EpochStore

P = ParamSpec("P")
R = TypeVar("R")


class AsyncEpochStore:
    """``await astore.call(store.method, *args)`` for any method of the store."""

    def __init__(self, store: EpochStore, *, threads_max: int = 8) -> None:
        self.store = store
        self._limiter = trio.CapacityLimiter(threads_max)

    async def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return await trio.to_thread.run_sync(
            functools.partial(fn, *args, **kwargs), limiter=self._limiter, abandon_on_cancel=True
        )

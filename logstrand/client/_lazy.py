"""A client opened on first use, inside a nursery: for node extensions (the
cleaner, the groups monitor) that speak to the cluster as a client does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from ..security import Credentials
    from ._async import AsyncClient


class LazyClient:
    def __init__(self, url: str, credentials: Credentials | None) -> None:
        self.url = url
        self.credentials = credentials
        self._client: AsyncClient | None = None
        self._lock = trio.Lock()

    async def get(self, nursery: trio.Nursery) -> AsyncClient:
        """The client, opened in ``nursery`` on the first call."""
        async with self._lock:
            if self._client is None:
                await nursery.start(self._run)
        assert self._client is not None
        return self._client

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        from ._open import open_client

        async with open_client(self.url, credentials=self.credentials) as client:
            self._client = client
            task_status.started()
            await trio.sleep_forever()

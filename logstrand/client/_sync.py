"""The blocking client: trio runs on a background thread.

Each call crosses into that thread (tens of microseconds), so for throughput
from ordinary code use ``append_batch`` or ``append_async``, which returns a
``concurrent.futures.Future`` at once and lets many appends coalesce.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from typing import TYPE_CHECKING, Any

import trio

from ..errors import ClosedError
from ._async import AsyncClient, open_client

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._settings import ClientSettings


class Client:
    """A blocking logstrand client.  Make one with ``logstrand.connect(url)``."""

    def __init__(self, url: str, *, settings: ClientSettings | None = None) -> None:
        self.url = url
        self._settings = settings
        self._ready = threading.Event()
        self._errors: list[BaseException] = []  # set by the trio thread
        self._client: AsyncClient | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="logstrand-client", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._errors:
            self._thread.join()
            raise self._errors[0]

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the constructor or to close()
            self._errors.append(exc)
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with open_client(self.url, settings=self._settings) as client:
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._client is None or self._token is None or self._stop is None:
            raise ClosedError("client is closed")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise ClosedError("client is closed") from None

    def append(self, log_id: int, payload: bytes | None, *, key: bytes | None = None) -> int:
        """Append one record and wait for its LSN.  Raises as ``AsyncClient.append``."""
        assert self._client is not None
        client = self._client
        return int(self._call(lambda: client.append(log_id, payload, key=key)))

    def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
    ) -> list[int]:
        assert self._client is not None
        client = self._client
        return list(self._call(lambda: client.append_batch(log_id, payloads, keys=keys)))

    def append_async(
        self, log_id: int, payload: bytes | None, *, key: bytes | None = None
    ) -> concurrent.futures.Future[int]:
        """Start an append and return at once; the future gets the LSN or the error."""
        client = self._client
        if client is None or self._token is None:
            raise ClosedError("client is closed")
        fut: concurrent.futures.Future[int] = concurrent.futures.Future()

        async def run() -> None:
            try:
                fut.set_result(await client.append(log_id, payload, key=key))
            except BaseException as exc:  # handed to the future's owner
                fut.set_exception(exc)

        try:
            trio.from_thread.run_sync(client.nursery.start_soon, run, trio_token=self._token)
        except trio.RunFinishedError:
            raise ClosedError("client is closed") from None
        return fut

    @property
    def async_client(self) -> AsyncClient:
        if self._client is None:
            raise ClosedError("client is closed")
        return self._client

    def close(self) -> None:
        if self._stop is not None and self._token is not None:
            stop = self._stop
            self._stop = None
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
            self._thread.join()
            self._client = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str, *, settings: ClientSettings | None = None) -> Client:
    """A blocking client::

    with logstrand.connect("sqlite:///tmp/c/cluster.db") as client:
        lsn = client.append(1, b"hello")
    """
    return Client(url, settings=settings)

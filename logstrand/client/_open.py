"""``open_client``: the client for async code, whichever event loop runs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Unpack

import sniffio

from ._async import AsyncClient, open_trio_client, resolve_connection
from ._asyncio import open_asyncio_client

if TYPE_CHECKING:
    import contextlib

    from ..security import Credentials
    from ._options import ConnectOptions
    from ._settings import ClientSettings


def open_client(
    url: str | None = None, **options: Unpack[ConnectOptions]
) -> contextlib.AbstractAsyncContextManager[AsyncClient]:
    """A client for async code, trio or asyncio alike::

        async with logstrand.open_client("sqlite:///tmp/c/cluster.db") as client:
            lsn = await client.append(1, b"hello")

    Under trio it is an ``AsyncClient`` in the caller's run; under asyncio an
    ``AsyncioClient`` (the same methods, awaited on the asyncio loop) whose
    I/O runs in a thread of its own.  ``url`` and ``options`` (``settings``,
    ``token``, ``ca``, ``cert``, ``key``, ``credentials``): as for
    ``logstrand.connect`` (``ConnectOptions``).
    """
    return _Opening(*resolve_connection(url, options))


class _Opening:
    """``open_client``'s context: which event loop runs it decides the client."""

    def __init__(
        self, url: str, settings: ClientSettings | None, credentials: Credentials | None
    ) -> None:
        self.args = (url, settings, credentials)
        self.inner: contextlib.AbstractAsyncContextManager[Any] | None = None

    async def __aenter__(self) -> AsyncClient:
        inner: contextlib.AbstractAsyncContextManager[Any]
        if sniffio.current_async_library() == "asyncio":
            inner = open_asyncio_client(*self.args)
        else:
            inner = open_trio_client(*self.args)
        self.inner = inner
        # Under asyncio an AsyncioClient: the same methods, for that loop.
        client: Any = await inner.__aenter__()
        return client  # type: ignore[no-any-return]

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self.inner is not None
        return await self.inner.__aexit__(*exc)

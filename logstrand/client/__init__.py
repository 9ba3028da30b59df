"""The client library: appends (single, batched, async) and, soon, readers."""

from ._async import AsyncClient, open_client
from ._settings import ClientSettings
from ._sync import Client, connect

__all__ = ["AsyncClient", "Client", "ClientSettings", "connect", "open_client"]

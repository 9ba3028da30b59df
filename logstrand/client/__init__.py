"""The client library: appends (single, batched, async) and readers."""

from ._async import AsyncClient, open_client
from ._reader import ReadStream
from ._reader_core import GapItem, RecordRun
from ._settings import ClientSettings
from ._sync import Client, connect

__all__ = [
    "AsyncClient",
    "Client",
    "ClientSettings",
    "GapItem",
    "ReadStream",
    "RecordRun",
    "connect",
    "open_client",
]

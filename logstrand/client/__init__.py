"""The client library: appends (single, batched, async) and readers."""

from typing import TYPE_CHECKING

from ._options import ConnectOptions, ManyOptions, ReadOptions, SubscribeOptions
from ._reader_core import GapItem, RecordRun

if TYPE_CHECKING:
    from ._arrow import ARROW_SCHEMA
    from ._async import AsyncClient
    from ._asyncio import AsyncioClient, open_asyncio_client
    from ._columns import ColumnBatch
    from ._open import open_client
    from ._reader import ReadStream
    from ._rebalance import RebalanceReport
    from ._settings import ClientSettings
    from ._sync import Client, connect
    from ._txn_requests import Prepared
    from ._views import LogSegment

_LAZY = {
    "ARROW_SCHEMA": "_arrow",
    # numpy: only for columnar reads (read_columns, read_arrow, Spark).
    "ColumnBatch": "_columns",
    "LogSegment": "_views",
    "AsyncClient": "_async",
    "open_client": "_open",
    "AsyncioClient": "_asyncio",
    "open_asyncio_client": "_asyncio",
    "ReadStream": "_reader",
    "RebalanceReport": "_rebalance",
    "ClientSettings": "_settings",
    "Prepared": "_txn_requests",
    "Client": "_sync",
    "connect": "_sync",
}


def __getattr__(name: str) -> object:
    # The shells pull in trio (and _arrow pyarrow); the reader's pure core must not.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARROW_SCHEMA",
    "AsyncClient",
    "AsyncioClient",
    "Client",
    "ClientSettings",
    "ColumnBatch",
    "ConnectOptions",
    "GapItem",
    "LogSegment",
    "ManyOptions",
    "Prepared",
    "ReadOptions",
    "ReadStream",
    "RebalanceReport",
    "RecordRun",
    "SubscribeOptions",
    "connect",
    "open_asyncio_client",
    "open_client",
]

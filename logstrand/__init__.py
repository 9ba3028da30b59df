"""logstrand: a distributed log store in the style of LogDevice.

Layout: ``types`` and ``errors`` are the vocabulary; ``wire`` is the protocol
(pure); ``logsdb`` is a node's local store; ``testing`` holds in-memory twins.
"""

from typing import TYPE_CHECKING

from .errors import (
    AccessDeniedError,
    ClosedError,
    CorruptionError,
    InvalidArgumentError,
    LogstrandError,
    NotAuthenticatedError,
    NotFoundError,
    PreemptedError,
    ProtocolError,
    StaleError,
    Status,
    TransientError,
)
from .types import (
    LSN_INVALID,
    LSN_MAX,
    LSN_OLDEST,
    TAIL,
    Gap,
    GapType,
    LogID,
    Record,
    compose_lsn,
    format_lsn,
    lsn_epoch,
    lsn_esn,
    parse_lsn,
)

if TYPE_CHECKING:
    from .client import (
        AsyncClient,
        AsyncioClient,
        Client,
        ClientSettings,
        ConnectOptions,
        ReadOptions,
        connect,
        open_client,
    )

__version__ = "0.1.0"

_CLIENT_NAMES = {
    "AsyncClient",
    "AsyncioClient",
    "Client",
    "ClientSettings",
    "ConnectOptions",
    "ReadOptions",
    "connect",
    "open_client",
}


def __getattr__(name: str) -> object:
    # The client pulls in trio; import it only when asked, so that the pure
    # parts (logstrand.wire, logstrand.logsdb, ...) stay free of it.
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'logstrand' has no attribute {name!r}")


__all__ = [
    "LSN_INVALID",
    "LSN_MAX",
    "LSN_OLDEST",
    "TAIL",
    "AccessDeniedError",
    "AsyncClient",
    "AsyncioClient",
    "Client",
    "ClientSettings",
    "ClosedError",
    "ConnectOptions",
    "CorruptionError",
    "Gap",
    "GapType",
    "InvalidArgumentError",
    "LogID",
    "LogstrandError",
    "NotAuthenticatedError",
    "NotFoundError",
    "PreemptedError",
    "ProtocolError",
    "ReadOptions",
    "Record",
    "StaleError",
    "Status",
    "TransientError",
    "__version__",
    "compose_lsn",
    "connect",
    "format_lsn",
    "lsn_epoch",
    "lsn_esn",
    "open_client",
    "parse_lsn",
]

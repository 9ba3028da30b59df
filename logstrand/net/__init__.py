"""Thin trio shells that move framed messages over TCP or TLS."""

from ._conn import (
    Connection,
    ConnLimits,
    SendBudget,
    connect,
    handshake_sync,
    serve_connection,
)
from ._tls import TlsStream

__all__ = [
    "ConnLimits",
    "Connection",
    "SendBudget",
    "TlsStream",
    "connect",
    "handshake_sync",
    "serve_connection",
]

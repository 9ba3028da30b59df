"""Thin trio shells that move framed messages over TCP or TLS."""

from ._conn import Connection, ConnLimits, SendBudget
from ._handshake import connect, handshake_sync, serve_connection, speaks_tls
from ._intake import PEER_INTAKE, Budget, Intake, IntakeLimits
from ._tls import TlsStream

__all__ = [
    "PEER_INTAKE",
    "Budget",
    "ConnLimits",
    "Connection",
    "Intake",
    "IntakeLimits",
    "SendBudget",
    "TlsStream",
    "connect",
    "handshake_sync",
    "serve_connection",
    "speaks_tls",
]

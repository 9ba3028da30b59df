"""Thin trio shells that move framed messages over TCP."""

from ._conn import Connection, ConnLimits, connect, handshake_sync, serve_connection

__all__ = ["ConnLimits", "Connection", "connect", "handshake_sync", "serve_connection"]

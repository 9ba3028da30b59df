"""Thin trio shells that move framed messages over TCP."""

from ._conn import Connection, connect, handshake_sync, serve_connection

__all__ = ["Connection", "connect", "handshake_sync", "serve_connection"]

"""The operator's console: an HTTP admin API (JSON, described by
``/openapi.json``) and a web page over it, served by every node started
with ``--http-port`` and by ``logstrand console`` alone (docs/console.md).

It is a client of the cluster like any other: it reads the epoch store and
asks the nodes, and holds nothing a node would have to keep.
"""

from ._serve import NodeConsole, NodeConsoleOptions, make_app, serve_console

__all__ = ["NodeConsole", "NodeConsoleOptions", "make_app", "serve_console"]

"""The ``logstrand`` command."""

from ._app import app, entry_point, main

__all__ = ["app", "entry_point", "main"]

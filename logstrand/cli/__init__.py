"""The ``logstrand`` command."""

from ._app import app, main

__all__ = ["app", "main"]

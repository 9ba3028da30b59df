"""The storage node process (trio) and its pure rules (``_core``)."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._node import Node, NodeOptions


def __getattr__(name: str) -> object:
    # The node pulls in trio; ``logstrand.storage._core`` must not.
    if name in ("Node", "NodeOptions"):
        from . import _node

        return getattr(_node, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Node", "NodeOptions"]

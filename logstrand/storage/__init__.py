"""The storage node: a composition of parts (see ``_node.py``), its trio
shells around pure cores (``_core``, ``_read_core``, ``_release_watch``)."""

from typing import TYPE_CHECKING

from ._options import NodeOptions

if TYPE_CHECKING:
    from ._node import Node


def __getattr__(name: str) -> object:
    # The node pulls in trio; the pure cores must not.
    if name == "Node":
        from ._node import Node

        return Node
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Node", "NodeOptions"]

"""The storage node process."""

from ._node import Node, NodeOptions

__all__ = ["Node", "NodeOptions"]

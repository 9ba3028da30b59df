"""Wire messages of the nodes' failure detector: gossip between nodes, and
what a node tells a client of who is up and who takes sequencers."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from . import _fields as f
from ._registry import _status, message

#: Nodes one gossip or cluster state may name (a cluster of more is not a
#: cluster this protocol is for).
NODES_MAX = 4096


def _pairs(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    f.tuple_of(f.u32, max_len=2 * NODES_MAX)(inst, attr, value)
    if len(value) % 2:
        raise ValueError(f"{attr.name}: not a whole number of (node, age) pairs")


@message(48, "node")
@attrs.frozen(slots=True)
class Gossip:
    """Node → node, every ``--gossip-interval``: how long ago the sender
    last had word of each node (``ages``: node, milliseconds; itself at 0),
    and whether it takes sequencers now."""

    TYPE_ID: ClassVar[int]
    node_id: int = attrs.field(validator=f.u32)
    ages: tuple[int, ...] = attrs.field(converter=f.to_tuple, validator=_pairs)
    sequencer: bool = attrs.field(validator=f.boolean)

    def age_map(self) -> dict[int, int]:
        a = self.ages
        return {a[i]: a[i + 1] for i in range(0, len(a), 2)}


@message(49, "any")
@attrs.frozen(slots=True)
class GetClusterState:
    """Client → node: which nodes does your failure detector find dead, and
    which take no sequencers?  (A client asks when a node is slow to answer.)"""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)


@message(50)
@attrs.frozen(slots=True)
class ClusterState:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    dead: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=NODES_MAX)
    )
    #: Live nodes that take no sequencers now (hold-down, a clock off).
    unwilling: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=NODES_MAX)
    )

"""Where things go: sequencer routing, nodesets and copysets.  Pure: no I/O."""

from ._copyset import CopysetSelector
from ._partitioner import murmur2, partition_for_key
from ._rendezvous import rendezvous_owner, rendezvous_rank, select_nodeset

__all__ = [
    "CopysetSelector",
    "murmur2",
    "partition_for_key",
    "rendezvous_owner",
    "rendezvous_rank",
    "select_nodeset",
]

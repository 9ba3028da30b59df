"""Where things go: sequencer routing, nodesets and copysets.  Pure: no I/O."""

from ._copyset import CopysetSelector
from ._rendezvous import rendezvous_owner, rendezvous_rank, select_nodeset

__all__ = ["CopysetSelector", "rendezvous_owner", "rendezvous_rank", "select_nodeset"]

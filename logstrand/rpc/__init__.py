"""The link layer: this process's connections to the nodes of a cluster.

One ``Links`` per process part (a client, a node's outgoing side) keeps one
``Link`` per node, made on first use: a framed connection (``logstrand.net``)
with request ids and waiting callers, inboxes for read streams, and a
handler for everything else a node sends unasked.  A node that cannot be
reached is *suspected* in the ``ClusterView`` for a while (routing goes
around it); one that answers is trusted again.  The view keeps the cluster's
configuration and membership current from the epoch store.
"""

from ._link import Link, Links, Waiters
from ._view import ClusterView

__all__ = ["ClusterView", "Link", "Links", "Waiters"]

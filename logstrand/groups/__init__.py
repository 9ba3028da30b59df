"""Consumer groups and their coordinators (docs/groups.md).

A group's members share out its logs (Kafka's partitions); its coordinator
is the node that sequences the group's positions log.  The rooms:

* ``_model``, ``_classic``, ``_consumer``, ``_mixed``: the pure cores.  The
  classic protocol (JoinGroup/SyncGroup, Kafka's ``GroupCoordinator``), the
  consumer protocol (KIP-848's heartbeats, whose rules ``client.subscribe``
  follows too), and the conversions between them.  No trio.
* ``_coordinator``: ``GroupCoordinator``, the trio shell over both cores,
  which writes each generation to the positions log before anybody hears of
  it.  It speaks in values: the Kafka front translates Kafka's group APIs
  into them (``kafka._group_apis``).
* ``_txns``, ``_native_txns``, ``_txn_metrics``: the transaction
  coordinator's shell (``TxnFront``) over ``transactions.TxnCoordinator``.
  It lives here, beside the group coordinator, because it is one with it:
  a transactional id's coordinator is the one of the group of the same
  name, its state is a record of the same positions log, and a node runs
  both as one extension.  The rules and the record formats stay in
  ``transactions``, below the client, which reads them.
* ``_node``: ``NodeGroups``, the node extension that runs both
  coordinators, serving ``GroupHeartbeat`` and ``TxnRequest`` (``wire``);
  ``_monitor``: ``GroupsMonitor``, the node extension that exports lag.

Positions themselves (what a committed position is, and the client's
``Groups``) stay in ``positions``: the client commits them, and this
package stands on the client.

The pure model is imported here at once; the shells, which bring trio and
the client, when first asked for (the CLI describes groups without them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ._model import (
    EMPTY,
    NATIVE_PREFIX,
    STABLE,
    JoinArgs,
    Reply,
    Settings,
    assigned_partitions,
    encode_assignment,
    encode_subscription,
    join_error,
    native_topic,
    spans_logs,
    subscribed_topics,
)

if TYPE_CHECKING:
    from ._consumer import Beat, ConsumerCoordinator
    from ._coordinator import CoordinatorHost, GroupCoordinator
    from ._monitor import GroupsMonitor, MonitorOptions
    from ._node import NodeGroups
    from ._txn_metrics import CoordinatorCollector, copy_items
    from ._txns import TxnFront, TxnHost

__all__ = [
    "EMPTY",
    "NATIVE_PREFIX",
    "STABLE",
    "Beat",
    "ConsumerCoordinator",
    "CoordinatorCollector",
    "CoordinatorHost",
    "GroupCoordinator",
    "GroupsMonitor",
    "JoinArgs",
    "MonitorOptions",
    "NodeGroups",
    "Reply",
    "Settings",
    "TxnFront",
    "TxnHost",
    "assigned_partitions",
    "copy_items",
    "encode_assignment",
    "encode_subscription",
    "join_error",
    "native_topic",
    "spans_logs",
    "subscribed_topics",
]

_WHERE = {
    "Beat": "_consumer",
    "ConsumerCoordinator": "_consumer",
    "CoordinatorHost": "_coordinator",
    "GroupCoordinator": "_coordinator",
    "GroupsMonitor": "_monitor",
    "MonitorOptions": "_monitor",
    "NodeGroups": "_node",
    "CoordinatorCollector": "_txn_metrics",
    "copy_items": "_txn_metrics",
    "TxnFront": "_txns",
    "TxnHost": "_txns",
}


__getattr__ = lazy_names(__name__, _WHERE)

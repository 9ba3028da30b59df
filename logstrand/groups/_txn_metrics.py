"""The transaction coordinator as metrics, read when the node is scraped:
the open transactions this node coordinates and the oldest one's age
(every node; ``kafka._txn_metrics`` has the read side).

Read from the scrape's thread, without a lock: each figure comes from one
copy of a dict (taken again if a change in the front's thread cut into it),
and nothing here changes what it reads.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._txns import TxnFront

#: The states of a transaction that is not over.
_OPEN = ("Ongoing", "PrepareCommit", "PrepareAbort")


def copy_items(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    for _ in range(10):
        try:
            return list(d.items())
        except RuntimeError:  # changed size under the copy: again
            continue
    return []


class CoordinatorCollector:
    """A prometheus collector over a node's transaction coordinator (every
    node runs one, ``NodeGroups``): the open transactions it
    coordinates and the oldest one's age.  It looks at the open ones only
    (``TxnFront.opened``), never at every id."""

    def __init__(self, txns: TxnFront) -> None:
        self.txns = txns

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.time()
        ids = self.txns.core.txns
        opened = []
        for txn_id, since in copy_items(self.txns.opened):
            txn = ids.get(txn_id)
            if txn is not None and txn.state.value in _OPEN:
                opened.append(since)
        yield GaugeMetricFamily(
            "logstrand_transactions_open",
            "Transactions not over that this node coordinates.",
            value=len(opened),
        )
        yield GaugeMetricFamily(
            "logstrand_transaction_oldest_open_seconds",
            "How long the oldest of them has been open (0: none).",
            value=max(0.0, now - min(opened, default=now)),
        )

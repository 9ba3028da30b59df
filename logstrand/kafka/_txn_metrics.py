"""read_committed reads as metrics, read when the node is scraped: for each
log a read_committed consumer fetches here, how far its last stable offset
is behind its end (an open transaction that holds readers back; a node's
Kafka front).  The coordinator's side is ``groups``' ``CoordinatorCollector``.

Read from the scrape's thread, without a lock: each figure comes from one
copy of a dict (taken again if a change in the front's thread cut into it),
and nothing here changes what it reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

from ..groups import copy_items

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._txn_reads import TxnReads


class LsoCollector:
    """A prometheus collector over a Kafka front's read_committed tracking:
    for each log its consumers fetch, how far the last stable offset is
    behind the end its transactions were read to."""

    def __init__(self, reads: TxnReads) -> None:
        self.reads = reads

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "logstrand_kafka_lso_lag_lsns",
            "LSNs between a log's last stable offset and the end its transactions "
            "were read to, for each log read_committed consumers fetch here.",
            labels=["log"],
        )
        for log_id, tracker in copy_items(self.reads.trackers):
            index = tracker.index
            firsts = [first for _, first in copy_items(index.open)]
            stable = min(firsts, default=index.scanned + 1)
            lag.add_metric([str(log_id)], index.scanned + 1 - stable)
        yield lag

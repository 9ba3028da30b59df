"""Consumer groups' positions and lag as metrics, from the node that
sequences the positions log.

A node extension (``logstrand node`` adds it).  Every ``interval_s`` it
looks whether this node runs the positions log's sequencer; if so it reads
the positions (through a client, as any consumer would) and sets, per group
and log, the committed LSN and the lag in records and in seconds.  Any other
node exports none, so a cluster's scrape has each figure once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import attrs
import trio
from prometheus_client import Gauge

from ..errors import LogstrandError
from ..records import POSITIONS_LOGS

if TYPE_CHECKING:
    from collections.abc import Callable, Container, Mapping, Sequence

    from prometheus_client import CollectorRegistry

    from ..positions import GroupLag, Position
    from ..security import Credentials

_log = logging.getLogger("logstrand.groups")


class _Metrics(Protocol):
    @property
    def registry(self) -> CollectorRegistry: ...


class MonitorHost(Protocol):
    """What the monitor needs of its node."""

    @property
    def url(self) -> str: ...
    @property
    def node_id(self) -> int: ...
    @property
    def credentials(self) -> Credentials | None: ...
    @property
    def metrics(self) -> _Metrics: ...
    def sequenced_logs(self) -> Container[int]: ...


class _Client(Protocol):
    async def group_positions(self, logs: Sequence[int] = ...) -> dict[str, list[Position]]: ...
    async def group_lags(
        self, positions: Mapping[str, Sequence[Position]]
    ) -> dict[str, list[GroupLag]]: ...


class ClientSource(Protocol):
    """A client opened on first use (``client.LazyClient``)."""

    async def get(self, nursery: trio.Nursery) -> _Client: ...


@attrs.frozen
class MonitorOptions:
    #: How often the figures are brought up to date (0: never).
    interval_s: float = 10.0
    #: (group, log) pairs exported at most, the first in name order.
    pairs_max: int = 1000


class GroupsMonitor:
    """See the module docstring."""

    def __init__(
        self,
        options: MonitorOptions,
        client: Callable[[str, Credentials | None], ClientSource],
    ) -> None:
        self.options = options
        #: ``client(url, credentials)``: how the monitor reads, as any consumer would.
        self._client = client
        self._labels: set[tuple[str, str]] = set()

    async def run(
        self, host: MonitorHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        r = host.metrics.registry
        names = ["group", "log"]
        self.committed = Gauge(
            "logstrand_consumer_group_committed_lsn",
            "A group's committed LSN on a log",
            names,
            registry=r,
        )
        self.lag_records = Gauge(
            "logstrand_consumer_group_lag_records",
            "Records above a group's committed LSN on a log (an estimate)",
            names,
            registry=r,
        )
        self.lag_seconds = Gauge(
            "logstrand_consumer_group_lag_seconds",
            "Age of the first record above a group's committed LSN on a log",
            names,
            registry=r,
        )
        client = self._client(host.url, host.credentials)
        async with trio.open_nursery() as nursery:
            task_status.started()
            while self.options.interval_s > 0:
                await trio.sleep(self.options.interval_s)
                try:
                    await self.update(host, client, nursery)
                except LogstrandError as exc:
                    _log.warning("node %d: group metrics: %s", host.node_id, exc)
                except Exception:
                    # A bug here must not take the node down: say so, go on.
                    _log.exception("node %d: group metrics failed", host.node_id)
            await trio.sleep_forever()

    async def update(self, host: MonitorHost, lazy: ClientSource, nursery: trio.Nursery) -> None:
        """Set the figures now (or clear them when this node does not
        sequence the positions log)."""
        seen: set[tuple[str, str]] = set()
        mine = [p for p in POSITIONS_LOGS if p in host.sequenced_logs()]
        if mine:
            client = await lazy.get(nursery)
            # Each positions log read once and the tails of every log in one
            # request per node, not a read of the group's positions log and a
            # tail_lsn (an ask of every node, an epoch-store read) per group
            # and log, which grew with the groups (py-spy of the nodes during
            # bench/groups.py found it on the commits' path).
            chosen: dict[str, list[Position]] = {}
            pairs = 0
            for group, held in (await client.group_positions(mine)).items():
                if pairs >= self.options.pairs_max:
                    break
                chosen[group] = held
                pairs += len(held)
            for group, lags in (await client.group_lags(chosen)).items():
                for lag in lags:
                    labels = (group, str(lag.log_id))
                    self.committed.labels(*labels).set(lag.committed or 0)
                    self.lag_records.labels(*labels).set(lag.lag_records)
                    self.lag_seconds.labels(*labels).set(lag.lag_ms / 1000)
                    seen.add(labels)
        for labels in self._labels - seen:
            for gauge in (self.committed, self.lag_records, self.lag_seconds):
                gauge.remove(*labels)
        self._labels = seen

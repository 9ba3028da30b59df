"""The groups monitor's update: the figures of many groups for the cost of
one read of the positions and one round of tails, not one per group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry

from logstrand.groups._monitor import GroupsMonitor, MonitorOptions
from logstrand.positions import POSITIONS_LOGS, GroupLag, Position

if TYPE_CHECKING:
    from collections.abc import Container, Mapping, Sequence

GROUPS = 300
LOGS = (1, 2, 3)


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()


class _Host:
    url = "sqlite:///unused"
    node_id = 1
    credentials = None

    def __init__(self) -> None:
        self.metrics = _Metrics()

    def sequenced_logs(self) -> Container[int]:
        return set(POSITIONS_LOGS)


class _Client:
    """Positions of ``GROUPS`` groups on ``LOGS``; counts the calls that ask
    the nodes for tails (``describe_group`` asks per log, as the client's does)."""

    def __init__(self) -> None:
        self.tail_rounds = 0

    async def group_positions(self, logs: Sequence[int] = ()) -> dict[str, list[Position]]:
        return {
            f"g{i:04d}": [Position(f"g{i:04d}", log, 10 * log, 1_000) for log in LOGS]
            for i in range(GROUPS)
        }

    def _lag(self, p: Position) -> GroupLag:
        return GroupLag(p.group, p.log_id, p.lsn, p.committed_ms, p.lsn + 5, 5, 7_000)

    async def describe_group(self, group: str) -> list[GroupLag]:
        self.tail_rounds += len(LOGS)
        return [self._lag(p) for p in (await self.group_positions())[group]]

    async def group_lags(
        self, positions: Mapping[str, Sequence[Position]]
    ) -> dict[str, list[GroupLag]]:
        self.tail_rounds += 1
        return {g: [self._lag(p) for p in held] for g, held in positions.items()}


class _Source:
    def __init__(self, client: _Client) -> None:
        self.client = client

    async def get(self, nursery: trio.Nursery) -> Any:
        return self.client


def _samples(host: _Host, name: str) -> dict[tuple[str, str], float]:
    out = {}
    for metric in host.metrics.registry.collect():
        for s in metric.samples:
            if s.name == name:
                out[s.labels["group"], s.labels["log"]] = s.value
    return out


async def test_an_update_asks_for_tails_once_however_many_groups() -> None:
    host, client = _Host(), _Client()
    monitor = GroupsMonitor(
        MonitorOptions(interval_s=3600.0, pairs_max=600), lambda *_: _Source(client)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(monitor.run, host)
        await monitor.update(host, _Source(client), nursery)
        nursery.cancel_scope.cancel()
    assert client.tail_rounds == 1
    lags = _samples(host, "logstrand_consumer_group_lag_records")
    # Whole groups in name order until 600 pairs: the first 200 groups.
    assert len(lags) == 600
    assert set(lags) == {(f"g{i:04d}", str(log)) for i in range(200) for log in LOGS}
    assert set(lags.values()) == {5.0}
    ages = _samples(host, "logstrand_consumer_group_lag_seconds")
    assert set(ages.values()) == {7.0}
    committed = _samples(host, "logstrand_consumer_group_committed_lsn")
    assert committed["g0000", "2"] == 20

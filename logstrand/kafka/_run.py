"""Starting a front: a client of the cluster, the front, its listener."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ._front import KafkaFront
from ._server import Limits, serve_kafka

if TYPE_CHECKING:
    from ..client import ClientSettings
    from ..security import Credentials

_log = logging.getLogger("logstrand.kafka")


async def run_front(
    url: str,
    host: str,
    port: int,
    *,
    advertise: tuple[str, int] | None = None,
    broker_id: int = 0,
    standalone: bool = True,
    auto_create: bool = False,
    num_partitions: int = 1,
    group_session_ms: int = 45_000,
    transactions: bool = False,
    max_transaction_timeout_ms: int = 900_000,
    settings: ClientSettings | None = None,
    credentials: Credentials | None = None,
    limits: Limits | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the Kafka protocol for the cluster at ``url`` until cancelled.
    Started with the address clients are told (``advertise``, else where it
    listens)."""
    from ..client import open_client

    async with open_client(url, settings=settings, credentials=credentials) as client:
        front = KafkaFront(
            client,
            broker_id=broker_id,
            advertise=advertise or (host, port),
            standalone=standalone,
            auto_create=auto_create,
            num_partitions=num_partitions,
            group_session_ms=group_session_ms,
            transactions=transactions,
            max_transaction_timeout_ms=max_transaction_timeout_ms,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(front.run)
            bound = await nursery.start(serve_kafka, front, host, port, limits)
            if advertise is None:
                front.advertise = (host, bound)
            _log.info("kafka front on %s:%d (clients told %s:%d)", host, bound, *front.advertise)
            task_status.started(front.advertise)

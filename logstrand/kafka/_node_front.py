"""A node's own Kafka front (``logstrand node --kafka-port PORT``).

The front runs in the node's process beside its parts, as a client of the
cluster like any other (it holds nothing the node would have to keep), and
the node's Kafka address goes into its entry of the cluster configuration
(``NodeConfig.kafka``) so that every front lists it among the brokers.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..groups import CoordinatorCollector
from ._front import KafkaFront
from ._server import Limits, serve_kafka
from ._topic_admin import AUTO_PARTITIONS
from ._txn_metrics import LsoCollector

if TYPE_CHECKING:
    import ssl

    from ..groups import NodeGroups
    from ..rpc import ClusterView
    from ..security import Credentials

_log = logging.getLogger("logstrand.kafka")


class KafkaHost(Protocol):
    """What the front needs of the node that runs it."""

    url: str
    node_id: int
    view: ClusterView
    credentials: Credentials | None
    #: The node's TLS (None: not secure); the front serves SASL_SSL with it.
    server_ssl: ssl.SSLContext | None
    listen: tuple[str, int] | None


@attrs.frozen
class NodeKafkaOptions:
    port: int
    #: host:port Kafka clients are told (default: the node's host and ``port``).
    #: The node puts it in its configuration at start (``NodeConfig.kafka``).
    advertise: str | None = None
    auto_create: bool = False
    #: The listener's bounds (``_server.Limits``: --kafka-budget,
    #: --kafka-decode-budget).
    limits: Limits = attrs.field(factory=Limits)
    #: Partitions of a topic made without a number (Kafka's num.partitions).
    num_partitions: int = AUTO_PARTITIONS
    #: Transactions served (--kafka-transactions), and the longest a
    #: producer may ask for (--kafka-max-transaction-timeout).
    transactions: bool = False
    max_transaction_timeout_ms: int = 900_000


class NodeKafkaFront:
    """A node extension (``storage.NodeExtension``) serving the Kafka protocol
    on ``options.port`` of the host the node listens on; the node records
    its address (``Node(kafka=...)``) before it starts its extensions."""

    def __init__(self, options: NodeKafkaOptions, groups: NodeGroups | None = None) -> None:
        self.options = options
        #: The node's group coordinator (started before the front), which
        #: the front shares.
        self.groups = groups

    def address(self) -> str:
        """What the node records (``Node(kafka=...)``): ``:PORT`` means its own host."""
        return self.options.advertise or f":{self.options.port}"

    async def run(
        self, host: KafkaHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        from ..client import open_client

        cfg = host.view.nodes[host.node_id]
        bind = host.listen[0] if host.listen else cfg.host
        where = cfg.kafka or f"{cfg.host}:{self.options.port}"
        h, p = where.rsplit(":", 1)
        async with open_client(host.url, credentials=host.credentials) as client:
            front = KafkaFront(
                client,
                broker_id=host.node_id,
                advertise=(h, int(p)),
                standalone=False,
                auto_create=self.options.auto_create,
                num_partitions=self.options.num_partitions,
                secure=host.server_ssl is not None,
                coordinator=None if self.groups is None else self.groups.coordinator,
                txns=None if self.groups is None else self.groups.txns,
                transactions=self.options.transactions,
                max_transaction_timeout_ms=self.options.max_transaction_timeout_ms,
            )
            registry = getattr(getattr(host, "metrics", None), "registry", None)
            collectors: list[Any] = [LsoCollector(front.data.txn_reads)]
            if self.groups is None:  # (else the node's own coordinator says it)
                collectors.append(CoordinatorCollector(front.txns))
            if registry is None or not self.options.transactions:
                collectors = []
            for c in collectors:
                registry.register(c)  # type: ignore[union-attr]
            try:
                await self._serve(host, front, bind, where, task_status)
            finally:
                for c in collectors:
                    registry.unregister(c)  # type: ignore[union-attr]

    async def _serve(
        self,
        host: KafkaHost,
        front: KafkaFront,
        bind: str,
        where: str,
        task_status: trio.TaskStatus[None],
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(front.run)
            await nursery.start(
                partial(serve_kafka, ssl_context=host.server_ssl),
                front,
                bind,
                self.options.port,
                self.options.limits,
            )
            _log.info(
                "node %d: Kafka front on %s:%d (as %s)",
                host.node_id,
                bind,
                self.options.port,
                where,
            )
            task_status.started()

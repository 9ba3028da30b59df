"""The Kafka front: Kafka requests answered with logstrand's client library.

Theory of operation
-------------------
The front holds nothing a node cannot lose: every answer comes from the
cluster through an ``AsyncClient`` (appends, reads, the epoch store's
configuration), so a front runs in every node (``--kafka-port``) or alone
(``logstrand kafka serve``), and any front can answer for any topic.

Brokers are fronts.  In a node, the brokers a Metadata answer lists are the
live nodes that serve the Kafka protocol, with their node ids as broker
ids, and the leader of a partition is the node that runs its log's
sequencer (so a producer's batches go to the node that sequences them); a
front alone is the one broker and leads everything.

Topics are named log ranges (``_topics``).  This module routes each API to
its handler; handlers answer every request they are given, with a Kafka
error code per topic or partition for what cannot be done.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ..epochstore import LogAttributes, NamedCache
from ..epochstore._model import check_range_name
from ..errors import LogstrandError
from ..groups import GroupCoordinator, TxnFront
from ..kafka_errors import KafkaError
from ..placement import select_nodeset
from ..transactions import MAX_TIMEOUT_MS
from ._acls import AclApis
from ._admin import AdminApis
from ._auth import ADMIN_APIS, FrontAuth, refused_admin
from ._data import DataPlane
from ._group_apis import GroupApis
from ._group_gate import gated
from ._group_heartbeat import ConsumerGroupApis
from ._group_offsets import GroupAdmin
from ._protocol import (
    API_VERSIONS,
    SASL_SERVED,
    SERVED,
    TXN_SERVED,
    UnsupportedRequest,
    api_name,
    encode_response,
    known_versions,
    missing,
)
from ._topic_admin import AUTO_PARTITIONS, TopicApis
from ._topics import topic_id
from ._txn_apis import TxnApis
from ._txn_gate import txn_gated

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")


class KafkaFront:
    """Answers Kafka requests (see the module docstring)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        broker_id: int,
        advertise: tuple[str, int],
        standalone: bool,
        auto_create: bool = False,
        num_partitions: int = AUTO_PARTITIONS,
        group_session_ms: int = 45_000,
        secure: bool = False,
        coordinator: GroupCoordinator | None = None,
        txns: TxnFront | None = None,
        transactions: bool = False,
        max_transaction_timeout_ms: int = MAX_TIMEOUT_MS,
    ) -> None:
        self.client, self.view, self.secure = client, client.view, secure
        self._named = NamedCache()
        self.auth = FrontAuth(client, secure=secure)
        self.broker_id, self.advertise = broker_id, advertise
        self.standalone, self.auto_create = standalone, auto_create
        #: Partitions of a topic made without a number (Kafka's num.partitions).
        self.num_partitions = num_partitions
        self.data = DataPlane(client, self.topics, self.auth)
        #: The node's coordinator (``groups.NodeGroups``, which runs it), or its own.
        self._own_coordinator = coordinator is None
        self.coordinator = coordinator or GroupCoordinator(self, session_ms=group_session_ms)
        #: Transactions (``groups._txns``), with ``--kafka-transactions``.
        self.transactions = transactions
        self.data.transactions = transactions
        #: The node's transaction coordinator (which it runs), or its own.
        self._own_txns = txns is None
        self.txns = txns or TxnFront(self, max_transaction_timeout_ms)
        self.txn_apis = TxnApis(self, self.txns)
        self.coordinator.transactions = transactions
        self.topic_apis = TopicApis(self)
        handlers = self._routes()
        #: Each group API behind its check of the user's grant on the group.
        self._handlers = {
            k: txn_gated(self.auth, k, gated(self.auth, k, h)) for k, h in handlers.items()
        }
        #: API key -> the versions served.
        self.served: dict[int, tuple[int, int]] = dict(SERVED)
        if secure:  # SASL is served (and needed) in secure mode only
            self.served.update(SASL_SERVED)
        if transactions:
            self.served.update(TXN_SERVED)
        #: APIs a client asked for that are not served (logged once each).
        self._said: set[int] = set()

    def _routes(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any] | None]]]:
        """API key -> its handler."""
        groups = GroupAdmin(self, self.coordinator)
        heartbeats = ConsumerGroupApis(self, self.coordinator)
        classic = GroupApis(self)
        acls, admin = AclApis(self), AdminApis(self)
        return {
            0: self.data.produce,
            1: self.data.fetch,
            2: self.data.list_offsets,
            API_VERSIONS: self._api_versions,
            3: self._metadata,
            8: groups.offset_commit,
            9: groups.offset_fetch,
            10: classic.find_coordinator,
            11: classic.join_group,
            12: classic.heartbeat,
            13: classic.leave_group,
            14: classic.sync_group,
            15: groups.describe_groups,
            16: groups.list_groups,
            19: self.topic_apis.create_topics,
            20: self.topic_apis.delete_topics,
            21: admin.delete_records,
            22: self._init_producer_id,
            23: self.data.offset_for_leader_epoch,
            24: self.txn_apis.add_partitions,
            25: self.txn_apis.add_offsets,
            26: self.txn_apis.end_txn,
            28: groups.txn_offset_commit,
            32: admin.describe_configs,
            33: admin.alter_configs,
            37: admin.create_partitions,
            42: groups.delete_groups,
            44: admin.incremental_alter_configs,
            47: groups.offset_delete,
            60: admin.describe_cluster,
            68: heartbeats.heartbeat,
            69: heartbeats.describe,
            29: acls.describe,
            30: acls.create,
            31: acls.delete,
            17: self.auth.handshake,
            36: self.auth.authenticate,
        }

    async def run(self) -> None:
        """What the front does in the background (the group coordinator's
        and the transaction coordinator's timers), until cancelled."""
        async with trio.open_nursery() as nursery:
            if self._own_coordinator:
                nursery.start_soon(self.coordinator.run)
            if self.transactions and self._own_txns:
                nursery.start_soon(self.txns.run)

    async def handle(self, request: Request) -> bytes | None:
        self.auth.check(request)
        if request.api_key in ADMIN_APIS and not await self.auth.may(request, "admin", None):
            body: dict[str, Any] | None = refused_admin(request)
        else:
            body = await self._handlers[request.api_key](request)
        if body is None:
            return None
        return encode_response(request.api_key, request.version, request.correlation_id, body)

    async def raw_sasl(self, conn: Any, data: bytes) -> bytes | None:
        """A raw SASL message after a SaslHandshake v0 (``_auth.FrontAuth.raw``)."""
        return await self.auth.raw(conn, data)

    def unsupported(self, exc: UnsupportedRequest) -> bytes | None:
        """A request for an API or version this front does not serve.

        ApiVersions at a version it does not know is answered at v0 with
        UNSUPPORTED_VERSION and the versions it does (KIP-511).  Any other
        API Kafka defines is answered at the version asked, with its error
        code set (``missing``) and a log line saying what logstrand lacks;
        only a request no Kafka version defines closes the connection."""
        if exc.api_key == API_VERSIONS:
            return encode_response(
                API_VERSIONS,
                0,
                exc.correlation_id,
                {"error_code": KafkaError.UNSUPPORTED_VERSION, "api_keys": self._api_keys()},
            )
        known = known_versions(exc.api_key)
        if known is None or not known[0] <= exc.version <= known[1]:
            return None
        code, why = missing(exc.api_key, self.served.get(exc.api_key))
        if exc.api_key not in self._said:
            self._said.add(exc.api_key)
            _log.warning(
                "kafka: a client asked for %s v%d: %s", api_name(exc.api_key), exc.version, why
            )
        body = {"error_code": code, "error_message": why, "throttle_time_ms": 0}
        return encode_response(exc.api_key, exc.version, exc.correlation_id, body)

    def _api_keys(self) -> list[dict[str, int]]:
        return [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(self.served.items())
        ]

    async def _api_versions(self, request: Request) -> dict[str, Any]:
        return {"error_code": 0, "api_keys": self._api_keys(), "throttle_time_ms": 0}

    async def _init_producer_id(self, request: Request) -> dict[str, Any]:
        """An idempotent producer's id: a logstrand producer id, epoch 0.  A
        producer that asks again (KIP-360, after an error) gets a new id,
        its sequences starting again from 0.  A transactional id's goes to
        the transaction coordinator, with ``--kafka-transactions``."""
        if request.body["transactional_id"] is not None and self.transactions:
            return await self.txn_apis.init_producer_id(request)
        if request.body["transactional_id"] is not None:
            _log.warning(
                "kafka: a producer asked for transactions (transactional.id %r): not served",
                request.body["transactional_id"],
            )
            return {
                "throttle_time_ms": 0,
                "error_code": KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1,
                "producer_epoch": -1,
            }
        pid = await self.client.allocate_producer_id()
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}

    # -- brokers and topics ------------------------------------------------------------

    def brokers(self) -> dict[int, tuple[str, int]]:
        """Broker id -> Kafka address of every front clients may use now."""
        out: dict[int, tuple[str, int]] = {}
        if not self.standalone:
            up = self.view.up
            for n in self.view.nodes.values():
                if n.kafka and n.node_id in up:
                    host, port = n.kafka.rsplit(":", 1)
                    out[n.node_id] = (host, int(port))
        out[self.broker_id] = self.advertise
        return out

    async def _fresh_brokers(self) -> dict[int, tuple[str, int]]:
        """``brokers``, after reading the configuration again (``Rereads``)
        when a live node has no Kafka address in it: a node that just
        started wrote its address after this front last read it."""
        brokers = self.brokers()
        if self.standalone or all(n in brokers for n in self.view.up if self.view.nodes.get(n)):
            return brokers
        await self.data.rereads.reread()
        return self.brokers()

    def leader(self, log_id: int, brokers: dict[int, tuple[str, int]]) -> int:
        node = None if self.standalone else self.view.sequencer_node(log_id)
        return node if node is not None and node in brokers else self.broker_id

    def replicas(
        self, r: NamedLogs, log_id: int, leader: int, brokers: dict[int, Any]
    ) -> list[int]:
        if self.standalone:
            return [leader]
        a = r.attributes
        nodeset = select_nodeset(
            log_id,
            self.view.storage_weights(),
            self.view.domains(a.replicate_across),
            size=a.nodeset_size,
            replication=a.replication_factor,
        )
        return [leader] + [n for n in nodeset if n in brokers and n != leader]

    def topics(self) -> dict[str, NamedLogs]:
        return self._named(self.view.ranges)

    async def _metadata(self, request: Request) -> dict[str, Any]:
        body, version = request.body, request.version
        asked = body["topics"]
        every = asked is None or (version == 0 and not asked)
        if every:
            # Ranges named since the view last read them are listed too (a
            # tool that lists topics right after `logs create --name`).
            await self.data.rereads.reread()
        named = self.topics()
        by_id: dict[bytes, str] = {}
        if not every and any(t["name"] is None for t in asked):
            # Asked by topic id (librdkafka does, for a KIP-848 assignment).
            await self.data.rereads.reread()
            named = self.topics()
            by_id = {topic_id(self.view.cluster, r): n for n, r in named.items()}
        unknown: list[bytes] = []
        if every:
            names = sorted(named)
        else:
            found = [t["name"] or by_id.get(t["topic_id"]) for t in asked]
            unknown = [t["topic_id"] for t, n in zip(asked, found, strict=True) if n is None]
            names = [n for n in found if n is not None]
        auto = self.auto_create and (version < 4 or body["allow_auto_topic_creation"])
        refused: list[str] = []
        if self.auth.secure:
            names, refused = await self._visible(request, names, named, every=every)
            auto = auto and await self.auth.may(request, "admin", None)
        missing = [n for n in names if n not in named]
        if missing:
            await self.data.rereads.reread()
            named = self.topics()
            missing = [n for n in names if n not in named]
        if missing and auto:
            for name in missing:
                await self._auto_create(name)
            named = self.topics()
        brokers = await self._fresh_brokers()
        return {
            "throttle_time_ms": 0,
            "brokers": [
                {"node_id": b, "host": h, "port": p, "rack": None}
                for b, (h, p) in sorted(brokers.items())
            ],
            "cluster_id": self.view.cluster,
            "controller_id": min(brokers),
            "topics": [self._topic_metadata(n, named.get(n), brokers) for n in names]
            + [
                {"error_code": KafkaError.UNKNOWN_TOPIC_ID, "name": None, "topic_id": t}
                for t in unknown
            ]
            + [
                {"error_code": KafkaError.TOPIC_AUTHORIZATION_FAILED, "name": n, "partitions": []}
                for n in refused
            ],
        }

    async def _visible(
        self, request: Request, names: list[str], named: dict[str, NamedLogs], *, every: bool
    ) -> tuple[list[str], list[str]]:
        """The topics a user may see (read or append to some partition of),
        and those asked by name that it may not."""
        seen, refused = [], []
        for n in names:
            r = named.get(n)
            ok = r is None
            for op in ("read", "append"):
                for log_id in () if r is None else [e for p in r.parts for e in (p.first, p.last)]:
                    ok = ok or await self.auth.may(request, op, log_id)
            if ok:
                seen.append(n)
            elif not every:
                refused.append(n)
        return seen, refused

    def _topic_metadata(
        self, name: str, r: NamedLogs | None, brokers: dict[int, tuple[str, int]]
    ) -> dict[str, Any]:
        if r is None:
            return {
                "error_code": KafkaError.UNKNOWN_TOPIC_OR_PARTITION,
                "name": name,
                "partitions": [],
            }
        partitions = []
        for i, log_id in enumerate(r.logs()):
            leader = self.leader(log_id, brokers)
            replicas = self.replicas(r, log_id, leader, brokers)
            partitions.append(
                {
                    "error_code": 0,
                    "partition_index": i,
                    "leader_id": leader,
                    "leader_epoch": -1,
                    "replica_nodes": replicas,
                    "isr_nodes": replicas,
                    "offline_replicas": [],
                }
            )
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic_id(self.view.cluster, r),
            "is_internal": False,
            "partitions": partitions,
        }

    async def _auto_create(self, name: str) -> None:
        try:
            check_range_name(name)
            attributes = LogAttributes(replication_factor=self.topic_apis.replication())
            await self.topic_apis.create_topic(name, self.num_partitions, attributes)
        except (LogstrandError, ValueError) as exc:
            _log.warning("kafka: cannot create topic %r: %s", name, exc)

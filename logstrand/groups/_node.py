"""The group coordinator of a node, for logstrand's own readers and for the
node's Kafka front (``logstrand node`` adds it to every node).

A node coordinates the groups of the positions logs whose sequencer it runs,
the same ones its Kafka front would (``_coordinator``): one coordinator, so a
group name means one group whichever protocol its members speak.  Members
of ``client.subscribe`` send ``GroupHeartbeat`` (``wire``) here, and are
served by the consumer protocol's rules (``_consumer``, KIP-848):
logs stand in for partitions, a subscription's logs for one topic
(``native_topic``).  What they are told, and which member owns which log,
is written to the group's positions log like a Kafka group's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..epochstore import NamedCache
from ..errors import Status
from ..kafka_errors import KafkaError
from ..transactions import EXPIRY_MS, MAX_TIMEOUT_MS
from ..wire import GroupHeartbeat, GroupHeartbeatReply, TxnReply, TxnRequest
from ._answers import NodeAnswers
from ._consumer import Beat
from ._coordinator import GroupCoordinator
from ._model import native_topic
from ._native_txns import NativeTxns
from ._txn_metrics import CoordinatorCollector
from ._txns import TxnFront

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ..net import Connection
    from ..rpc import ClusterView
    from ..security import Credentials

_log = logging.getLogger("logstrand.groups")
#: Heartbeats (and transaction requests) a node answers at once; past it,
#: OVERLOADED (``_answers``).
AT_ONCE = 1024
#: What a refusal of the coordinator becomes in a native reply.
_STATUS: dict[int, Status] = {
    KafkaError.NOT_COORDINATOR: Status.REDIRECTED,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: Status.AGAIN,
    KafkaError.INVALID_GROUP_ID: Status.INVALID_PARAM,
}


class GroupsHost(Protocol):
    """What the coordinator needs of its node."""

    url: str
    node_id: int
    credentials: Credentials | None

    def register(
        self, message_type: type, handler: Callable[[Connection, Any], Awaitable[None]]
    ) -> None: ...


class _NodeSide:
    """The coordinator's ``CoordinatorHost`` on a node, and the transaction
    coordinator's ``TxnHost``."""

    standalone = False
    coordinator: GroupCoordinator

    def __init__(self, client: AsyncClient, node_id: int) -> None:
        self.client = client
        self.view: ClusterView = client.view
        self.broker_id = node_id
        self._named = NamedCache()

    def topics(self) -> dict[str, NamedLogs]:
        return self._named(self.view.ranges)

    def brokers(self) -> dict[int, tuple[str, int]]:
        out: dict[int, tuple[str, int]] = {}
        up = self.view.up
        for n in self.view.nodes.values():
            if n.kafka and (n.node_id in up or n.node_id == self.broker_id):
                host, port = n.kafka.rsplit(":", 1)
                out[n.node_id] = (host, int(port))
        return out


class NodeGroups:
    """A node extension (``storage.NodeExtension``): the node's group
    coordinator, serving ``GroupHeartbeat``, and its transaction
    coordinator, serving ``TxnRequest`` (``_native_txns``); ``coordinator``
    and ``txns`` are there for the node's Kafka front once started."""

    def __init__(
        self,
        session_ms: int = 45_000,
        max_transaction_timeout_ms: int = MAX_TIMEOUT_MS,
        transactional_id_expiry_ms: int = EXPIRY_MS,
    ) -> None:
        self.session_ms = session_ms
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self.transactional_id_expiry_ms = transactional_id_expiry_ms
        self.coordinator: GroupCoordinator | None = None
        self.txns: TxnFront | None = None

    async def run(
        self, host: GroupsHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        from ..client import open_client

        async with open_client(host.url, credentials=host.credentials) as client:
            side = _NodeSide(client, host.node_id)
            self.coordinator = coordinator = GroupCoordinator(side, session_ms=self.session_ms)
            side.coordinator = coordinator
            self.txns = txns = TxnFront(
                side, self.max_transaction_timeout_ms, self.transactional_id_expiry_ms
            )
            registry = getattr(getattr(host, "metrics", None), "registry", None)
            collector = CoordinatorCollector(txns)
            if registry is not None:
                registry.register(collector)
            try:
                await self._serve(host, client, coordinator, txns, task_status)
            finally:
                if registry is not None:
                    registry.unregister(collector)

    async def _serve(
        self,
        host: GroupsHost,
        client: AsyncClient,
        coordinator: GroupCoordinator,
        txns: TxnFront,
        task_status: trio.TaskStatus[None],
    ) -> None:
        async with trio.open_nursery() as nursery:
            beats = NodeAnswers(nursery, GroupHeartbeatReply, self.heartbeat, AT_ONCE)
            host.register(GroupHeartbeat, beats.take)
            native = NativeTxns(txns, client)
            answers = NodeAnswers(nursery, TxnReply, native.request, AT_ONCE)
            host.register(TxnRequest, answers.take)
            nursery.start_soon(coordinator.run)
            nursery.start_soon(txns.run)
            task_status.started()

    async def heartbeat(self, msg: GroupHeartbeat, peer: str) -> GroupHeartbeatReply:
        """The answer to one member's heartbeat (see the module docstring)."""
        coordinator = self.coordinator
        assert coordinator is not None
        rid = msg.request_id
        code = await coordinator.take(msg.group)
        if code:
            status = _STATUS.get(code, Status.FAILED)
            return GroupHeartbeatReply(rid, int(status), int(code), _why(code))
        if msg.group in coordinator.core.groups:
            return _refused(rid, KafkaError.INCONSISTENT_GROUP_PROTOCOL, "a classic Kafka group")
        group = coordinator.ccore.groups.get(msg.group)
        member = group.members.get(msg.member_id) if group is not None else None
        topics = None
        if msg.subscribe:
            logs = tuple(sorted(set(msg.logs)))
            if not logs:
                return _refused(rid, KafkaError.INVALID_REQUEST, "a subscription to no logs")
            topic = native_topic(logs)
            others = {t for m in (group.members.values() if group else ()) for t in m.topics} - {
                topic
            }
            if others and (member is None or set(member.topics) != others):
                return _refused(
                    rid,
                    KafkaError.INCONSISTENT_GROUP_PROTOCOL,
                    f"members of group {msg.group} read other logs: every member "
                    "subscribes to the same logs",
                )
            coordinator.native_logs[topic] = logs
            topics = frozenset({topic})
        elif msg.epoch == 0:
            return _refused(rid, KafkaError.INVALID_REQUEST, "a member joins with its logs")
        mine = topics or (member.topics if member is not None else frozenset())
        owned = None
        if msg.owned is not None and len(mine) == 1:
            (topic,) = mine
            owned = frozenset((topic, i) for i in msg.owned)
        beat = Beat(
            msg.group, msg.member_id, msg.epoch, msg.instance_id, topics, owned, "logstrand", peer
        )
        ccore = coordinator.ccore
        code, out = ccore.heartbeat(trio.current_time(), beat, coordinator.partitions_of)
        coordinator.poke()
        if code:
            return _refused(rid, code, _why(code))
        # What a member is told is written down before it hears it.
        await coordinator.write_down()
        given = out.get("assignment")
        return GroupHeartbeatReply(
            rid,
            int(Status.OK),
            member_id=out["member_id"],
            epoch=out["member_epoch"],
            heartbeat_ms=ccore.heartbeat_ms,
            assigned=None if given is None else tuple(sorted(i for _t, i in given)),
        )


def _why(code: int) -> str:
    return KafkaError(code).name


def _refused(rid: int, code: int, why: str) -> GroupHeartbeatReply:
    return GroupHeartbeatReply(rid, int(Status.OK), int(code), why[:1000])

"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848,
``group.protocol=consumer``) in the front: topic ids and names,
subscriptions by name or pattern, the answer's assignment, what admin
clients are shown.  A thin shell over ``groups._consumer.ConsumerCoordinator``,
which the group coordinator (``groups._coordinator``) holds beside the classic one, so
that both kinds of group share the positions logs, the membership record
and the way a coordinator moves."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import re2
import trio

from ..groups import Beat
from ..kafka_errors import KafkaError
from ._topics import topic_id

if TYPE_CHECKING:
    from ..groups import GroupCoordinator
    from ._group_apis import GroupFront
    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")
#: The longest subscription pattern taken, and the memory RE2 may give it.
PATTERN_MAX = 1000
PATTERN_MEMORY_MAX = 1 << 20


def compile_pattern(pattern: str) -> Any:
    """A subscription's pattern, compiled by RE2 (None: not one RE2 takes).

    KIP-848 defines the patterns as RE2/J's, and a linear-time engine is
    what a front needs for patterns its clients send: Python's ``re``
    backtracks, and ``(a|aa)+$`` against a topic of 40 a's and a ``!``
    took minutes of the node's one event loop."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = PATTERN_MEMORY_MAX
    try:
        return re2.compile(pattern, options)
    except re2.error:
        return None


#: ConsumerGroupDescribe's authorized_operations when they were not asked for.
OPERATIONS_NOT_ASKED = -(2**31)


class ConsumerGroupApis:
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe (see the module docstring)."""

    def __init__(self, front: GroupFront, coordinator: GroupCoordinator) -> None:
        self.front = front
        self.coordinator = coordinator

    def _ids(self) -> tuple[dict[bytes, str], dict[str, bytes]]:
        cluster = self.front.view.cluster
        by_name = {name: topic_id(cluster, r) for name, r in self.front.topics().items()}
        return {tid: name for name, tid in by_name.items()}, by_name

    def _topics(self, b: dict[str, Any]) -> frozenset[str] | int | None:
        """The subscription asked (None: unchanged), or an error code."""
        pattern = b.get("subscribed_topic_regex")
        if pattern:
            if len(pattern) > PATTERN_MAX:
                return KafkaError.INVALID_REQUEST
            regex = compile_pattern(pattern)
            if regex is None:
                return KafkaError.INVALID_REQUEST
            return frozenset(t for t in self.front.topics() if regex.fullmatch(t))
        names = b.get("subscribed_topic_names")
        return None if names is None else frozenset(names)

    async def heartbeat(self, request: Request) -> dict[str, Any]:
        b = request.body
        group = b["group_id"]
        code = await self.coordinator.take(group)
        # A classic group: an empty one becomes this protocol's (forgotten
        # there), as Kafka converts it, so that consumers moving to
        # group.protocol=consumer find their group's offsets; one with
        # members becomes a consumer group of classic members, which go on
        # with their own protocol (Kafka's online upgrade, ``groups._mixed``).
        classic = self.coordinator.core
        if not code and group in classic.groups and classic.forget(group) != KafkaError.NONE:
            code = self.coordinator.upgrade(group)
        if not code and b.get("server_assignor") not in (None, "", "uniform", "range"):
            code = KafkaError.UNSUPPORTED_ASSIGNOR
        topics = self._topics(b)
        if isinstance(topics, int):
            code = code or topics
        if code or isinstance(topics, int):
            return _failed(code or KafkaError.INVALID_REQUEST)
        by_id, by_name = self._ids()
        owned = None
        if b.get("topic_partitions") is not None:
            owned = frozenset(
                (by_id[t["topic_id"]], p)
                for t in b["topic_partitions"]
                if t["topic_id"] in by_id
                for p in t["partitions"]
            )
        beat = Beat(
            group,
            b["member_id"],
            b["member_epoch"],
            b.get("instance_id"),
            topics,
            owned,
            request.client_id or "",
            getattr(request.conn, "peer", ""),
        )
        ccore = self.coordinator.ccore
        code, out = ccore.heartbeat(trio.current_time(), beat, self.coordinator.partitions_of)
        if beat.epoch in (-1, -2):  # a member left: maybe only classic ones remain
            self.coordinator.maybe_downgrade(group)
        self.coordinator.poke()
        if code:
            return _failed(code)
        await self.coordinator.write_down()
        answer: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "member_id": out["member_id"],
            "member_epoch": out["member_epoch"],
            "heartbeat_interval_ms": ccore.heartbeat_ms,
            "assignment": None,
        }
        if out.get("assignment") is not None:
            per_topic: dict[str, list[int]] = {}
            for topic, index in sorted(out["assignment"]):
                per_topic.setdefault(topic, []).append(index)
            answer["assignment"] = {
                "topic_partitions": [
                    {"topic_id": by_name[t], "partitions": ps}
                    for t, ps in per_topic.items()
                    if t in by_name
                ]
            }
        return answer

    async def describe(self, request: Request) -> dict[str, Any]:
        """ConsumerGroupDescribe: each group's epoch, state and members, with
        what each owns and its target.  A classic group is GROUP_ID_NOT_FOUND
        here, as with Kafka (admin clients then ask DescribeGroups)."""
        _by_id, by_name = self._ids()

        def parts(ps: set[tuple[str, int]]) -> dict[str, Any]:
            per_topic: dict[str, list[int]] = {}
            for topic, index in sorted(ps):
                if topic in by_name:  # a subscription to logs has no Kafka name
                    per_topic.setdefault(topic, []).append(index)
            return {
                "topic_partitions": [
                    {"topic_id": by_name[t], "topic_name": t, "partitions": ix}
                    for t, ix in per_topic.items()
                ]
            }

        out = []
        for name in request.body["group_ids"]:
            entry: dict[str, Any] = {
                "error_code": await self.coordinator.take(name),
                "error_message": None,
                "group_id": name,
                "group_state": "Dead",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "uniform",
                "members": [],
                "authorized_operations": OPERATIONS_NOT_ASKED,
            }
            group = self.coordinator.ccore.groups.get(name)
            if not entry["error_code"] and group is None:
                entry["error_code"] = KafkaError.GROUP_ID_NOT_FOUND
                entry["error_message"] = f"group {name} is not a consumer-protocol group"
            elif group is not None and not entry["error_code"]:
                entry.update(
                    group_state=group.state, group_epoch=group.epoch, assignment_epoch=group.epoch
                )
                entry["members"] = [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": None,
                        "member_epoch": m.epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": sorted(t for t in m.topics if t in by_name),
                        "subscribed_topic_regex": None,
                        "assignment": parts(m.given),
                        "target_assignment": parts(group.target.get(m.member_id, set())),
                    }
                    for m in group.members.values()
                ]
            out.append(entry)
        return {"throttle_time_ms": 0, "groups": out}


def _failed(code: int) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": KafkaError(code).name,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }

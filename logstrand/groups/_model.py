"""What a group coordinator holds: groups, members, their states.  Pure.

``_classic.Coordinator`` runs the protocol over these; ``snapshot`` and
``restore`` turn a Stable group into the record the coordinator writes to
the group's positions log and back (so that the next coordinator, after a
failover, knows the members and their assignments).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Final

import attrs

EMPTY: Final = "Empty"
PREPARING: Final = "PreparingRebalance"
COMPLETING: Final = "CompletingRebalance"
STABLE: Final = "Stable"


#: ``(token, body)``: the answer to a request that waited, or to this one.
Reply = tuple[int, dict[str, Any]]


@attrs.frozen
class Settings:
    #: Session timeouts a member may ask for (Kafka's group.min/max.session.timeout.ms).
    session_min_ms: int = 1_000
    session_max_ms: int = 1_800_000
    #: How long an Empty group waits for more members before it completes.
    initial_delay_s: float = 0.5
    #: Members of one group at most (Kafka's group.max.size).
    members_max: int = 10_000


@attrs.define(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    #: ``(name, metadata)`` in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0
    join_token: int | None = None
    sync_token: int | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@attrs.define(eq=False)
class Group:
    name: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    #: By member id, in the order they joined.
    members: dict[str, Member] = attrs.Factory(dict)
    #: Static members: instance id -> member id.
    instances: dict[str, str] = attrs.Factory(dict)
    #: Member ids handed out (MEMBER_ID_REQUIRED) and not yet used -> until when.
    pending: dict[str, float] = attrs.Factory(dict)
    #: A rebalance completes at ``rebalance_by`` at the latest, and not
    #: before ``not_before`` (the initial delay of an Empty group).
    rebalance_by: float = 0.0
    not_before: float = 0.0


@attrs.frozen
class JoinArgs:
    group: str
    member_id: str
    instance_id: str | None
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str = ""
    client_host: str = ""
    #: JoinGroup v4+ hands a new dynamic member its id before it joins.
    require_id: bool = True
    #: JoinGroup v9+ can tell a static leader that came back to skip the
    #: assignment (``skip_assignment``): the group needs no rebalance.
    can_skip: bool = False


@attrs.frozen
class ClassicMeta:
    """What a classic member said in its JoinGroup."""

    protocols: tuple[tuple[str, bytes], ...]
    session_ms: int
    rebalance_ms: int

    @property
    def protocol(self) -> str:
        """The protocol its answers name: its first (the coordinator assigns,
        so which one does not matter, but it must be one it has)."""
        return self.protocols[0][0]

    def to_json(self) -> dict[str, Any]:
        return {
            "protocols": [[n, m.hex()] for n, m in self.protocols],
            "session_ms": self.session_ms,
            "rebalance_ms": self.rebalance_ms,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClassicMeta:
        return cls(
            tuple((n, bytes.fromhex(m)) for n, m in d["protocols"]),
            int(d["session_ms"]),
            int(d["rebalance_ms"]),
        )


def error(code: int, **extra: Any) -> dict[str, Any]:
    return {"error_code": int(code), **extra}


def join_error(code: int, member_id: str = "") -> dict[str, Any]:
    return error(code, generation_id=-1, protocol_name="", leader="", member_id=member_id)


def choose_protocol(group: Group) -> str:
    """The protocol every member supports with the most first-place votes
    (ties: the first member's order)."""
    members = list(group.members.values())
    common = set.intersection(*({n for n, _ in m.protocols} for m in members))
    votes: dict[str, int] = {}
    for m in members:
        best = next(n for n, _ in m.protocols if n in common)
        votes[best] = votes.get(best, 0) + 1
    order = [n for n, _ in members[0].protocols if n in common]
    return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))


def join_answer(
    group: Group, member: Member, *, members: bool, skip: bool = False
) -> dict[str, Any]:
    listed = []
    if members and member.member_id == group.leader:
        listed = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "metadata": m.metadata(group.protocol or ""),
            }
            for m in group.members.values()
        ]
    return {
        "error_code": 0,
        "generation_id": group.generation,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol or "",
        "leader": group.leader or "",
        "member_id": member.member_id,
        "members": listed,
        "skip_assignment": skip,
    }


def sync_answer(group: Group, member: Member) -> dict[str, Any]:
    return {
        "error_code": 0,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol,
        "assignment": member.assignment,
    }


def snapshot(group: Group | None) -> dict[str, Any] | None:
    """A Stable or Empty group as the record the coordinator writes (``restore`` reads it)."""
    if group is None or group.state not in (STABLE, EMPTY):
        return None
    return {
        "generation": group.generation,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol,
        "leader": group.leader,
        "members": [
            {
                "id": m.member_id,
                "instance": m.instance_id,
                "client": m.client_id,
                "host": m.client_host,
                "session_ms": m.session_ms,
                "rebalance_ms": m.rebalance_ms,
                "protocols": [[n, md.hex()] for n, md in m.protocols],
                "assignment": m.assignment.hex(),
            }
            for m in group.members.values()
        ],
    }


def restore(now: float, group_name: str, snap: dict[str, Any]) -> Group:
    """Take a group as a coordinator before this one wrote it: Stable, each
    member given a fresh session (a member that is gone is dropped when it
    ends, as it would have been)."""
    group = Group(group_name, STABLE, int(snap["generation"]))
    group.protocol_type, group.protocol = snap["protocol_type"], snap["protocol"]
    group.leader = snap["leader"]
    for m in snap["members"]:
        member = Member(
            m["id"],
            m["instance"],
            m["client"],
            m["host"],
            int(m["session_ms"]),
            int(m["rebalance_ms"]),
            group.protocol_type or "",
            [(n, bytes.fromhex(md)) for n, md in m["protocols"]],
            bytes.fromhex(m["assignment"]),
            now + int(m["session_ms"]) / 1000,
        )
        group.members[member.member_id] = member
        if member.instance_id is not None:
            group.instances[member.instance_id] = member.member_id
    if not group.members:
        group.state = EMPTY
    return group


def string_at(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", data, pos)
    pos += 2
    if n < 0 or pos + n > len(data):
        raise ValueError("bad string")
    return data[pos : pos + n].decode(), pos + n


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topics of a consumer's subscription (Kafka's
    ConsumerProtocolSubscription: version, then an array of topic names);
    empty for what does not read as one."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, out = 6, set()
        for _ in range(min(max(count, 0), len(metadata))):
            topic, pos = string_at(metadata, pos)
            out.add(topic)
        return out
    except (struct.error, ValueError, UnicodeDecodeError):
        return set()


def topic_partitions(data: bytes, pos: int) -> tuple[dict[str, list[int]], int]:
    """An array of (topic, [partition]) at ``pos`` (the consumer protocol's
    assignments and owned partitions), and the position after it.

    Raises:
        ValueError, struct.error, UnicodeDecodeError: it does not read as one.
    """
    (count,) = struct.unpack_from(">i", data, pos)
    pos, out = pos + 4, {}
    for _ in range(min(max(count, 0), len(data))):
        topic, pos = string_at(data, pos)
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if not 0 <= n <= (len(data) - pos) // 4:
            raise ValueError("bad array")
        out[topic] = list(struct.unpack_from(f">{n}i", data, pos))
        pos += 4 * n
    return out, pos


def assigned_partitions(assignment: bytes) -> dict[str, list[int]]:
    """The partitions of a consumer's assignment (ConsumerProtocolAssignment:
    version, then an array of (topic, [partition])); empty for what does
    not read as one."""
    try:
        return topic_partitions(assignment, 2)[0]
    except (struct.error, ValueError, UnicodeDecodeError):
        return {}


def _putstring_at(out: bytearray, text: str) -> None:
    data = text.encode()
    out += struct.pack(">h", len(data)) + data


def encode_subscription(topics: list[str]) -> bytes:
    """A ConsumerProtocolSubscription (v0) of ``topics``, as tools read it."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        _putstring_at(out, t)
    return bytes(out + struct.pack(">i", -1))


def encode_assignment(parts: list[tuple[str, int]]) -> bytes:
    """A ConsumerProtocolAssignment (v0) of ``(topic, partition)`` pairs."""
    topics: dict[str, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t, ps in topics.items():
        _putstring_at(out, t)
        out += struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return bytes(out + struct.pack(">i", -1))


# -- subscriptions to logs (logstrand's own readers, ``client.subscribe``) ----------

#: Topic names of subscriptions to logs start with it (no Kafka topic or
#: named range can).
NATIVE_PREFIX: Final = "#"


def native_topic(logs: tuple[int, ...]) -> str:
    """The topic a subscription to ``logs`` (sorted, distinct) stands under
    in the coordinator: a digest of the logs and their count, so that
    members subscribed to the same logs share one topic whose partition
    ``i`` is ``logs[i]``."""
    digest = hashlib.sha256(",".join(map(str, logs)).encode()).hexdigest()[:16]
    return f"{NATIVE_PREFIX}{digest}/{len(logs)}"


def logs_spans(logs: tuple[int, ...]) -> list[list[int]]:
    """Sorted logs as ``[first, last]`` runs (a range of a million logs is one)."""
    spans: list[list[int]] = []
    for log in logs:
        if spans and spans[-1][1] == log - 1:
            spans[-1][1] = log
        else:
            spans.append([log, log])
    return spans


#: Logs of one subscription at most (``wire.SUBSCRIBED_LOGS_MAX``).
NATIVE_LOGS_MAX: Final = 16_384


def spans_logs(spans: list[list[int]]) -> tuple[int, ...]:
    """``logs_spans`` back; ValueError past ``NATIVE_LOGS_MAX`` logs."""
    if sum(int(last) - int(first) + 1 for first, last in spans) > NATIVE_LOGS_MAX:
        raise ValueError("a subscription to more logs than a member may have")
    return tuple(log for first, last in spans for log in range(int(first), int(last) + 1))

"""Classic members in a consumer-protocol group: Kafka 4's online upgrade
(KIP-848's migration path).  Pure.

A group moves from the classic protocol to the consumer protocol one
consumer at a time, while it keeps consuming:

1. **Upgrade.**  The first ConsumerGroupHeartbeat to a classic group with
   members turns it into a consumer group (``upgrade``), once it is Stable:
   each classic member stays, as a *classic member* of the consumer group,
   with the subscription and the partitions of its last SyncGroup, and the
   group keeps its generation as its epoch.  (A group in a rebalance is
   asked to wait: COORDINATOR_LOAD_IN_PROGRESS, which clients retry.)
2. **Classic members speak their own protocol.**  A JoinGroup is, to the
   consumer group, a heartbeat that carries the member's subscription and
   the partitions it still owns (``owned_partitions`` of its subscription,
   v1 and later; none for an eager consumer, which gave everything up
   before it joined).  It is answered at once, not when others join: the
   generation is the member's epoch, there is no leader and no member list
   (the coordinator assigns), and the following SyncGroup hands over the
   partitions the reconciliation gave the member (``ConsumerCoordinator``'s
   rule 2: partitions another member still owns come later).
3. **Rebalances reach classic members through Heartbeat.**  A classic
   member whose epoch is behind the group's, that still holds partitions to
   give up, or whose target holds partitions free now, is answered
   REBALANCE_IN_PROGRESS, and joins again.
4. **Sessions** are the member's own (its JoinGroup's), and LeaveGroup
   removes it, as for any member.

5. **Downgrade.**  When the last consumer-protocol member of a group is
   gone (it left, or its session ended) and classic members remain, the
   group is a classic group again (``downgrade``): its members, their
   protocols and their partitions as they stand, and a rebalance, so that
   they join it with the classic protocol (their next Heartbeat says so).
   An empty consumer group becomes classic with its next JoinGroup.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from ..kafka_errors import KafkaError
from ._consumer import Beat, CGroup, ConsumerCoordinator, Member, Partition
from ._model import (
    STABLE,
    ClassicMeta,
    Group,
    JoinArgs,
    assigned_partitions,
    encode_assignment,
    join_error,
    string_at,
    subscribed_topics,
    topic_partitions,
)
from ._model import Member as ClassicMember

if TYPE_CHECKING:
    from collections.abc import Callable


def owned_partitions(metadata: bytes) -> frozenset[Partition]:
    """The partitions a ConsumerProtocolSubscription says its member still
    owns (v1 and later: after the topics and the user data; none for v0,
    or for what does not read as one)."""
    try:
        (version, count) = struct.unpack_from(">hi", metadata, 0)
        if version < 1:
            return frozenset()
        pos = 6
        for _ in range(min(max(count, 0), len(metadata))):
            _, pos = string_at(metadata, pos)
        (user_data,) = struct.unpack_from(">i", metadata, pos)
        owned, _ = topic_partitions(metadata, pos + 4 + max(user_data, 0))
        return frozenset((t, i) for t, ps in owned.items() for i in ps)
    except (struct.error, ValueError, UnicodeDecodeError):
        return frozenset()


def upgrade(core: ConsumerCoordinator, now: float, group: Group) -> None:
    """Rule 1: the Stable classic ``group`` as a consumer group of classic
    members, in ``core``.  The caller forgets it on the classic side."""
    cgroup = CGroup(group.name, group.generation)
    for m in group.members.values():
        meta = m.metadata(group.protocol or "")
        given = {(t, i) for t, ps in assigned_partitions(m.assignment).items() for i in ps}
        member = Member(
            m.member_id,
            m.instance_id,
            frozenset(subscribed_topics(meta)),
            group.generation,
            given=given,
            deadline=max(m.deadline, now),
            client_id=m.client_id,
            client_host=m.client_host,
            classic=ClassicMeta(tuple(m.protocols), m.session_ms, m.rebalance_ms),
        )
        cgroup.members[m.member_id] = member
        cgroup.target[m.member_id] = set(given)
        if m.instance_id is not None:
            cgroup.instances[m.instance_id] = m.member_id
        for p in given:
            cgroup.owner[p] = m.member_id
    core.adopt(cgroup)


def all_classic(group: CGroup) -> bool:
    """Rule 5: whether ``group`` has members, all of them classic."""
    return bool(group.members) and all(m.classic is not None for m in group.members.values())


def downgrade(group: CGroup) -> Group:
    """Rule 5: the consumer group ``group``, all of whose members are
    classic, as a Stable classic group (the caller starts its rebalance)."""
    members = list(group.members.values())
    protocols = [m.classic.protocols for m in members if m.classic is not None]
    common = set.intersection(*({n for n, _ in ps} for ps in protocols))
    chosen = next((n for n, _ in protocols[0] if n in common), protocols[0][0][0])
    out = Group(group.name, STABLE, group.epoch, "consumer", chosen, members[0].member_id)
    for m in members:
        assert m.classic is not None
        out.members[m.member_id] = ClassicMember(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.classic.session_ms,
            m.classic.rebalance_ms,
            "consumer",
            list(m.classic.protocols),
            assignment=encode_assignment(sorted(m.given)),
            deadline=m.deadline,
        )
        if m.instance_id is not None:
            out.instances[m.instance_id] = m.member_id
    return out


def join(
    core: ConsumerCoordinator, now: float, args: JoinArgs, sizes: Callable[[str], int]
) -> dict[str, Any]:
    """Rule 2: a classic member's JoinGroup to a consumer group, answered."""
    protocols = args.protocols
    if args.protocol_type != "consumer" or not protocols:
        return join_error(KafkaError.INCONSISTENT_GROUP_PROTOCOL, args.member_id)
    group = core.groups[args.group]
    member_id = args.member_id
    if not member_id and args.instance_id is not None:
        member_id = group.instances.get(args.instance_id, "")
    if not member_id:
        member_id = core.new_id()
        if args.require_id and args.instance_id is None:
            return join_error(KafkaError.MEMBER_ID_REQUIRED, member_id)
    member = group.members.get(member_id)
    metadata = protocols[0][1]
    owned = owned_partitions(metadata)
    if member is not None:
        # What it no longer says it owns it gave up before joining (an
        # eager consumer gives up everything): free at once.
        core.release(group, member, (member.given | member.revoking) - owned)
    beat = Beat(
        args.group,
        member_id,
        0 if member is None else member.epoch,
        args.instance_id,
        frozenset(subscribed_topics(metadata)),
        owned,
        args.client_id,
        args.client_host,
    )
    code, out = core.heartbeat(now, beat, sizes)
    if code:
        return join_error(code, member_id)
    member = group.members[out["member_id"]]
    member.classic = ClassicMeta(tuple(protocols), args.session_ms, args.rebalance_ms)
    _beat(core, group, member, now)
    return {
        "error_code": 0,
        "generation_id": member.epoch,
        "protocol_type": "consumer",
        "protocol_name": member.classic.protocol,
        "leader": "",
        "member_id": member.member_id,
        "members": [],
        "skip_assignment": False,
    }


def sync(group: CGroup, generation: int, member_id: str) -> dict[str, Any]:
    """Rule 2: a classic member's SyncGroup: its partitions."""
    member = group.members.get(member_id)
    if member is None or member.classic is None:
        return {"error_code": KafkaError.UNKNOWN_MEMBER_ID, "assignment": b""}
    if generation != member.epoch:
        return {"error_code": KafkaError.ILLEGAL_GENERATION, "assignment": b""}
    return {
        "error_code": 0,
        "protocol_type": "consumer",
        "protocol_name": member.classic.protocol,
        "assignment": encode_assignment(sorted(member.given)),
    }


def heartbeat(
    core: ConsumerCoordinator, now: float, group: CGroup, generation: int, member_id: str
) -> int:
    """Rule 3: a classic member's Heartbeat."""
    member = group.members.get(member_id)
    if member is None or member.classic is None:
        return KafkaError.UNKNOWN_MEMBER_ID
    if generation != member.epoch:
        return KafkaError.ILLEGAL_GENERATION
    _beat(core, group, member, now)
    target = group.target.get(member.member_id, set())
    free = any(group.owner.get(p) is None for p in target - member.given)
    behind = member.epoch != group.epoch or bool(member.revoking) or free
    return KafkaError.REBALANCE_IN_PROGRESS if behind else KafkaError.NONE


def leave(
    core: ConsumerCoordinator,
    group: CGroup,
    leaving: list[tuple[str, str | None]],
    sizes: Callable[[str], int],
) -> list[int]:
    """Rule 4: classic members leave (LeaveGroup): an error code each."""
    codes: list[int] = []
    for member_id, instance_id in leaving:
        if not member_id and instance_id is not None:
            member_id = group.instances.get(instance_id, "")
        member = group.members.get(member_id)
        if member is None:
            codes.append(KafkaError.UNKNOWN_MEMBER_ID)
            continue
        core.remove(group, member, sizes)
        codes.append(KafkaError.NONE)
    return codes


def _beat(core: ConsumerCoordinator, group: CGroup, member: Member, now: float) -> None:
    """The member's session goes on, by its own timeout (rule 4)."""
    assert member.classic is not None
    member.deadline = now + member.classic.session_ms / 1000
    core.wake(group, member.deadline)

"""Kafka's consumer group protocol (KIP-848), as a coordinator runs it.  Pure.

Rules
-----
A member's only request is a heartbeat (ConsumerGroupHeartbeat): it joins
with epoch 0 and its subscription, and from then on says what it owns
whenever that changed.  The coordinator assigns partitions itself:

1. **Epochs.**  The group epoch goes up whenever the membership or a
   subscription changes, and a new target assignment is computed then
   (``target``: per topic, its partitions spread evenly over the members
   subscribed to it, a partition staying with its member when that member
   is under its share).
2. **Reconciling, one step per heartbeat.**  A member first gives up what
   its target no longer holds: its next answer leaves those partitions out,
   and they stay its own until it says, in a later heartbeat, that it no
   longer owns them.  Only then does it reach the group epoch and get the
   partitions of its target that no other member still owns; the rest come
   in a later answer, once their owner gave them up.  So a partition is
   never owned by two members at once.
3. **Liveness.**  A member's session ends ``session_ms`` after its last
   heartbeat; it is dropped and its partitions are free.  A member leaves
   with epoch -1; a static member (``instance_id``) with -2 keeps its
   partitions for a session, and when it comes back (epoch 0, the same
   instance id) it gets them again without a new epoch.
4. **Fencing.**  A heartbeat with an epoch other than the member's own (or
   the one before, which a heartbeat in flight may carry) is
   FENCED_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID: the member
   drops what it owns and joins again.  A commit must carry the member's
   epoch (STALE_MEMBER_EPOCH otherwise).

Partitions are ``(topic, index)`` here; the shell turns them into topic ids.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..kafka_errors import KafkaError
from ._model import ClassicMeta

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

Partition = tuple[str, int]
LEAVE: Final = -1
LEAVE_STATIC: Final = -2


def heartbeat_ms_for(session_ms: int) -> int:
    """The heartbeat interval members are told: a tenth of the session (5 s
    at most, Kafka's default), so that many beats fit in one session and the
    survivors hear of a dead member soon after its session ends."""
    return max(250, min(5_000, session_ms // 10))


@attrs.define(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    topics: frozenset[str]
    epoch: int = 0
    previous_epoch: int = -1
    #: What it was told it owns, and what it was asked to give up and has
    #: not yet said it did (still its own until then).
    given: set[Partition] = attrs.Factory(set)
    revoking: set[Partition] = attrs.Factory(set)
    deadline: float = 0.0
    #: A static member away (left with -2) until its session ends.
    away: bool = False
    client_id: str = ""
    client_host: str = ""
    #: A classic member (``_mixed.ClassicMeta``): it joins, syncs and
    #: heartbeats with the classic APIs.  None: a consumer-protocol member.
    classic: ClassicMeta | None = None


@attrs.define(eq=False)
class CGroup:
    name: str
    epoch: int = 0
    members: dict[str, Member] = attrs.Factory(dict)
    instances: dict[str, str] = attrs.Factory(dict)
    target: dict[str, set[Partition]] = attrs.Factory(dict)
    owner: dict[Partition, str] = attrs.Factory(dict)
    #: Partitions per topic when the target was computed.
    sizes: dict[str, int] = attrs.Factory(dict)

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if any(m.epoch != self.epoch or m.revoking for m in self.members.values()):
            return "Reconciling"
        return "Stable"


@attrs.frozen
class Beat:
    """One ConsumerGroupHeartbeat, as the core needs it (None: unchanged)."""

    group: str
    member_id: str
    epoch: int
    instance_id: str | None = None
    topics: frozenset[str] | None = None
    owned: frozenset[Partition] | None = None
    client_id: str = ""
    client_host: str = ""


def spread(
    members: Mapping[str, frozenset[str]],
    sizes: Mapping[str, int],
    before: Mapping[str, set[Partition]],
) -> dict[str, set[Partition]]:
    """The target assignment: each topic's partitions spread over the members
    subscribed to it (shares differ by one at most), each partition left
    with its member from ``before`` while that member is under its share."""
    out: dict[str, set[Partition]] = {m: set() for m in members}
    for topic in sorted({t for ts in members.values() for t in ts}):
        takers = sorted(m for m, ts in members.items() if topic in ts)
        count = sizes.get(topic, 0)
        if not takers or count <= 0:
            continue
        share, extra = divmod(count, len(takers))
        quota = {m: share + (1 if i < extra else 0) for i, m in enumerate(takers)}
        free = []
        for index in range(count):
            p = (topic, index)
            keeper = next((m for m in takers if p in before.get(m, ())), None)
            if keeper is not None and quota[keeper] > 0:
                out[keeper].add(p)
                quota[keeper] -= 1
            else:
                free.append(p)
        for p in free:
            taker = max(takers, key=lambda m: (quota[m], -takers.index(m)))
            out[taker].add(p)
            quota[taker] -= 1
    return out


class ConsumerCoordinator:
    """Every consumer-protocol group this coordinator holds."""

    def __init__(
        self,
        session_ms: int = 45_000,
        heartbeat_ms: int = 5_000,
        members_max: int = 10_000,
        ids: Callable[[], str] | None = None,
    ) -> None:
        self.session_ms = session_ms
        self.heartbeat_ms = heartbeat_ms
        self.members_max = members_max
        self.groups: dict[str, CGroup] = {}
        self._ids = ids or (lambda: str(uuid.uuid4()))
        self._deadlines: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        #: Groups whose epoch or assignment changed since ``take_changed``.
        self._changed: set[str] = set()

    # -- time ----------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    def _wake(self, group: CGroup, at: float) -> None:
        heapq.heappush(self._deadlines, (at, next(self._seq), group.name))

    wake = _wake

    def new_id(self) -> str:
        return self._ids()

    def adopt(self, group: CGroup) -> None:
        """A group made elsewhere (``_mixed.upgrade``): held here, its
        members' sessions watched, and written down."""
        self.groups[group.name] = group
        soonest = min((m.deadline for m in group.members.values()), default=None)
        if soonest is not None:
            self._wake(group, soonest)
        self._changed.add(group.name)

    def release(self, group: CGroup, member: Member, gone: set[Partition]) -> None:
        """``member`` owns ``gone`` no longer (a classic member said so)."""
        member.given -= gone
        member.revoking -= gone
        for p in gone:
            if group.owner.get(p) == member.member_id:
                del group.owner[p]

    def remove(self, group: CGroup, member: Member, sizes: Callable[[str], int]) -> None:
        """``member`` left: its partitions are free and the group retargets."""
        self._drop(group, member)
        self._retarget(group, sizes)

    def tick(self, now: float, sizes: Callable[[str], int]) -> list[str]:
        """Drop members whose session ended (``sizes``: a topic's
        partitions); the groups that lost members."""
        lost: list[str] = []
        due: set[str] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            due.add(heapq.heappop(self._deadlines)[2])
        for name in sorted(due):
            group = self.groups.get(name)
            if group is None:
                continue
            gone = [m for m in group.members.values() if m.deadline <= now]
            for m in gone:
                self._drop(group, m)
            if gone:
                self._retarget(group, sizes)
                lost.append(name)
            soonest = min((m.deadline for m in group.members.values()), default=None)
            if soonest is not None:
                self._wake(group, soonest)
        return lost

    # -- heartbeats --------------------------------------------------------------------

    def heartbeat(
        self, now: float, beat: Beat, sizes: Callable[[str], int]
    ) -> tuple[int, dict[str, Any]]:
        """The error code and, when it is NONE, ``member_id``, ``member_epoch``
        and ``assignment`` (a set of partitions, or None: unchanged)."""
        group = self.groups.get(beat.group)
        if beat.epoch == 0:
            return self._join(now, beat, sizes)
        member = group.members.get(beat.member_id) if group is not None else None
        if group is None or member is None:
            return KafkaError.UNKNOWN_MEMBER_ID, {}
        if beat.epoch in (LEAVE, LEAVE_STATIC):
            if beat.epoch == LEAVE_STATIC and member.instance_id is not None:
                member.away = True  # its partitions wait for it, one session
                return KafkaError.NONE, {
                    "member_id": member.member_id,
                    "member_epoch": LEAVE_STATIC,
                }
            self._drop(group, member)
            self._retarget(group, sizes)
            return KafkaError.NONE, {"member_id": member.member_id, "member_epoch": LEAVE}
        if beat.epoch not in (member.epoch, member.previous_epoch):
            return KafkaError.FENCED_MEMBER_EPOCH, {}
        member.deadline = now + self.session_ms / 1000
        if beat.topics is not None and beat.topics != member.topics:
            member.topics = beat.topics
            self._retarget(group, sizes)
        elif any(sizes(t) != group.sizes.get(t, 0) for t in member.topics):
            self._retarget(group, sizes)
        return KafkaError.NONE, self._reconcile(group, member, beat.owned, force=False)

    def _join(
        self, now: float, beat: Beat, sizes: Callable[[str], int]
    ) -> tuple[int, dict[str, Any]]:
        group = self.groups.setdefault(beat.group, CGroup(beat.group))
        old_id = group.instances.get(beat.instance_id) if beat.instance_id is not None else None
        if old_id is not None:
            old = group.members[old_id]
            if not old.away and old.member_id != beat.member_id:
                return KafkaError.UNRELEASED_INSTANCE_ID, {}
            # The instance back: the old member's partitions and epoch go on.
            member = old
            del group.members[old_id]
            member.member_id = beat.member_id or f"{beat.instance_id}-{self._ids()}"
            member.away = False
            group.members[member.member_id] = member
            group.instances[beat.instance_id or ""] = member.member_id
            for p in member.given | member.revoking:
                group.owner[p] = member.member_id
            group.target[member.member_id] = group.target.pop(old_id, set())
        else:
            known = group.members.get(beat.member_id)
            if known is not None:  # joined again: what it had is free
                self._drop(group, known)
            elif len(group.members) >= self.members_max:
                return KafkaError.GROUP_MAX_SIZE_REACHED, {}
            member = Member(
                beat.member_id or self._ids(), beat.instance_id, beat.topics or frozenset()
            )
            group.members[member.member_id] = member
            if beat.instance_id is not None:
                group.instances[beat.instance_id] = member.member_id
        member.client_id, member.client_host = beat.client_id, beat.client_host
        member.deadline = now + self.session_ms / 1000
        self._wake(group, member.deadline)
        resubscribed = beat.topics is not None and beat.topics != member.topics
        if resubscribed:
            member.topics = beat.topics or frozenset()
        if old_id is None or resubscribed:
            self._retarget(group, sizes)
        return KafkaError.NONE, self._reconcile(group, member, beat.owned, force=True)

    def _reconcile(
        self, group: CGroup, member: Member, owned: frozenset[Partition] | None, *, force: bool
    ) -> dict[str, Any]:
        """One step towards the member's target (rule 2)."""
        before = set(member.given)
        if owned is not None and member.revoking and not (owned & member.revoking):
            for p in member.revoking:
                if group.owner.get(p) == member.member_id:
                    del group.owner[p]
            member.revoking.clear()
        target = group.target.get(member.member_id, set())
        drop = member.given - target
        if drop:
            member.given -= drop
            member.revoking |= drop
        if not member.revoking:
            if member.epoch != group.epoch:
                member.previous_epoch, member.epoch = member.epoch, group.epoch
            for p in sorted(target - member.given):
                if group.owner.get(p) in (None, member.member_id):
                    group.owner[p] = member.member_id
                    member.given.add(p)
        resync = owned is not None and owned != member.given and not member.revoking
        changed = force or member.given != before or resync
        if member.given != before:
            self._changed.add(group.name)
        return {
            "member_id": member.member_id,
            "member_epoch": member.epoch,
            "assignment": set(member.given) if changed else None,
        }

    # -- membership changes -----------------------------------------------------------

    def _drop(self, group: CGroup, member: Member) -> None:
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        if member.instance_id is not None and group.instances.get(member.instance_id) == (
            member.member_id
        ):
            del group.instances[member.instance_id]
        for p in member.given | member.revoking:
            if group.owner.get(p) == member.member_id:
                del group.owner[p]

    def _retarget(self, group: CGroup, sizes: Callable[[str], int]) -> None:
        """A new group epoch and target assignment (rule 1)."""
        group.epoch += 1
        topics = {t for m in group.members.values() for t in m.topics}
        group.sizes = {t: sizes(t) for t in sorted(topics)}
        subscriptions = {m.member_id: m.topics for m in group.members.values()}
        group.target = spread(subscriptions, group.sizes, group.target)
        self._changed.add(group.name)

    # -- what the rest of the front asks -------------------------------------------------

    def check_commit(self, group_name: str, member_id: str, epoch: int) -> int:
        group = self.groups.get(group_name)
        if epoch < 0 and (group is None or not group.members):
            # A consumer that assigned itself its partitions (or an admin
            # client): Kafka takes its commits while the group has no members.
            return KafkaError.NONE
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return KafkaError.UNKNOWN_MEMBER_ID
        if epoch not in (member.epoch, member.previous_epoch):
            # A classic member's commit names its generation, as in Kafka.
            classic = member.classic is not None
            return KafkaError.ILLEGAL_GENERATION if classic else KafkaError.STALE_MEMBER_EPOCH
        return KafkaError.NONE

    def take_changed(self) -> list[str]:
        out, self._changed = sorted(self._changed), set()
        return out

    def forget(self, group_name: str) -> int:
        group = self.groups.get(group_name)
        if group is not None and group.members:
            return KafkaError.NON_EMPTY_GROUP
        self.groups.pop(group_name, None)
        return KafkaError.NONE

    def clear(self, which: Callable[[str], bool] | None = None) -> None:
        for name in [n for n in self.groups if which is None or which(n)]:
            del self.groups[name]

    def snapshot(self, group_name: str) -> dict[str, Any] | None:
        group = self.groups.get(group_name)
        if group is None:
            return None

        def parts(ps: set[Partition]) -> list[list[Any]]:
            return [[t, i] for t, i in sorted(ps)]

        return {
            "type": "consumer",
            "epoch": group.epoch,
            "sizes": group.sizes,
            "members": [
                {
                    "id": m.member_id,
                    "instance": m.instance_id,
                    "topics": sorted(m.topics),
                    "epoch": m.epoch,
                    "given": parts(m.given),
                    "revoking": parts(m.revoking),
                    "target": parts(group.target.get(m.member_id, set())),
                    "client": m.client_id,
                    "host": m.client_host,
                    **({} if m.classic is None else {"classic": m.classic.to_json()}),
                }
                for m in group.members.values()
            ],
        }

    def restore(self, now: float, group_name: str, snap: dict[str, Any]) -> None:
        group = CGroup(group_name, int(snap["epoch"]), sizes=dict(snap["sizes"]))
        for m in snap["members"]:
            member = Member(
                m["id"],
                m["instance"],
                frozenset(m["topics"]),
                int(m["epoch"]),
                given={(t, i) for t, i in m["given"]},
                revoking={(t, i) for t, i in m["revoking"]},
                deadline=now + self.session_ms / 1000,
                client_id=m["client"],
                client_host=m["host"],
                classic=None if "classic" not in m else ClassicMeta.from_json(m["classic"]),
            )
            group.members[member.member_id] = member
            group.target[member.member_id] = {(t, i) for t, i in m["target"]}
            if member.instance_id is not None:
                group.instances[member.instance_id] = member.member_id
            for p in member.given | member.revoking:
                group.owner[p] = member.member_id
        self.groups[group_name] = group
        if group.members:
            self._wake(group, now + self.session_ms / 1000)

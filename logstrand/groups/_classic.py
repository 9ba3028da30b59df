"""Kafka's classic group membership protocol, as a coordinator runs it.  Pure.

Rules
-----
A group goes Empty -> PreparingRebalance -> CompletingRebalance -> Stable,
and back to PreparingRebalance whenever its membership changes (Kafka's
``GroupCoordinator``):

1. **Join.**  A dynamic member that joins without an id (JoinGroup v4 and
   later) is given one and told to join again with it (MEMBER_ID_REQUIRED);
   the id is kept for a session timeout.  A static member
   (``group.instance.id``) gets an id at once; an instance that joins again
   while the group is Stable, with the same protocols, replaces its old id
   and keeps its assignment without a rebalance, unless it leads the group.
2. **Rebalance.**  A join that changes anything starts one: every member
   must join again within the largest rebalance timeout of the group.  An
   Empty group waits ``initial_delay_s`` first (more each time another
   member comes, up to the rebalance timeout), so that members started
   together land in one generation.  When every member has joined, or the
   time is up (those that did not are dropped), the generation goes up,
   the protocol every member supports that they rank best together is
   chosen, and each join is answered; the leader's answer lists the
   members and their metadata.
3. **Sync.**  The leader's SyncGroup carries every member's assignment; the
   group is Stable once it arrives, and every member's SyncGroup is
   answered with its own.  A sync of the wrong generation is
   ILLEGAL_GENERATION; during a rebalance, REBALANCE_IN_PROGRESS.
4. **Liveness.**  A member's session ends ``session_timeout`` after its last
   heartbeat, join or sync, and it is dropped (a rebalance follows).  While
   a member waits for its join to be answered, the rebalance timeout
   applies instead.  A member that leaves (LeaveGroup) is dropped at once.
5. **Commits.**  A commit from a member is checked against the generation:
   an unknown member, a stale generation or a group completing a rebalance
   is refused; a commit with generation -1 and no member id is a plain
   commit, taken only when the group has no members.

Nothing here reads a clock: callers pass ``now`` (seconds).  Requests that
wait (joins, syncs) are named by the caller's ``token``; every call returns
the answers now due, as ``(token, body)``, and ``next_deadline`` says when
``tick`` must run next.  A heap of deadlines names the groups to look at,
so a tick costs what is due, not what exists.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from typing import TYPE_CHECKING, Any

from ..kafka_errors import KafkaError
from ._model import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    Group,
    JoinArgs,
    Member,
    Reply,
    Settings,
    choose_protocol,
    error,
    join_answer,
    join_error,
    restore,
    snapshot,
    sync_answer,
)

if TYPE_CHECKING:
    from collections.abc import Callable


class Coordinator:
    """Every group this coordinator holds (see the module docstring)."""

    def __init__(
        self, settings: Settings | None = None, ids: Callable[[], str] | None = None
    ) -> None:
        self.settings = settings or Settings()
        #: Makes the unique part of a member id (a seeded simulation passes its own).
        self._ids = ids or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, Group] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        #: Groups that became Stable with a new generation since the last
        #: ``take_stabilized`` (to be written down before their syncs are answered).
        self._stabilized: list[str] = []

    # -- time ----------------------------------------------------------------------

    def _wake(self, group: Group, at: float) -> None:
        heapq.heappush(self._deadlines, (at, next(self._seq), group.name))

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    def adopt(self, group: Group, now: float) -> list[Reply]:
        """A group made elsewhere (``_mixed.downgrade``): held here
        from now on, and rebalanced, so that its members join it."""
        self.groups[group.name] = group
        soonest = min((m.deadline for m in group.members.values()), default=now)
        self._wake(group, max(soonest, now))
        return self._rebalance(group, now)

    def tick(self, now: float) -> list[Reply]:
        """Drop members whose session ended, complete rebalances whose time came."""
        due: set[str] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            due.add(heapq.heappop(self._deadlines)[2])
        out: list[Reply] = []
        for name in sorted(due):
            group = self.groups.get(name)
            if group is not None:
                out += self._expire(group, now)
                out += self._maybe_complete(group, now)
        return out

    def _expire(self, group: Group, now: float) -> list[Reply]:
        for member_id, until in list(group.pending.items()):
            if until <= now:
                del group.pending[member_id]
        # A member waiting for its join to be answered is not timed by its
        # session: the rebalance's own deadline covers it.
        timed = [
            m
            for m in group.members.values()
            if not (group.state == PREPARING and m.join_token is not None)
        ]
        out: list[Reply] = []
        for m in [m for m in timed if m.deadline <= now]:
            out += self._remove(group, m, now)
        # Heartbeats only move deadlines later, so one look at the earliest
        # keeps the heap as small as the groups (not one entry per heartbeat).
        soonest = min((m.deadline for m in timed if m.member_id in group.members), default=None)
        if soonest is not None and soonest > now:
            self._wake(group, soonest)
        return out

    # -- joins -------------------------------------------------------------------------

    def join(self, now: float, token: int, a: JoinArgs) -> list[Reply]:
        s = self.settings
        if not s.session_min_ms <= a.session_ms <= s.session_max_ms:
            return [(token, join_error(KafkaError.INVALID_SESSION_TIMEOUT, a.member_id))]
        group = self.groups.get(a.group)
        if group is None:
            group = self.groups[a.group] = Group(a.group)
        if not a.protocols or (
            group.members and not self._compatible(group, a.protocol_type, a.protocols)
        ):
            return [(token, join_error(KafkaError.INCONSISTENT_GROUP_PROTOCOL, a.member_id))]
        if a.member_id == "":
            return self._join_new(now, token, group, a)
        member = group.members.get(a.member_id)
        if a.instance_id is not None and group.instances.get(a.instance_id, a.member_id) != (
            a.member_id
        ):
            return [(token, join_error(KafkaError.FENCED_INSTANCE_ID, a.member_id))]
        if member is None:
            if a.member_id not in group.pending:
                return [(token, join_error(KafkaError.UNKNOWN_MEMBER_ID, a.member_id))]
            del group.pending[a.member_id]
            return self._add(now, token, group, a, a.member_id)
        return self._rejoin(now, token, group, member, a)

    def _join_new(self, now: float, token: int, group: Group, a: JoinArgs) -> list[Reply]:
        if len(group.members) + len(group.pending) >= self.settings.members_max:
            return [(token, join_error(KafkaError.GROUP_MAX_SIZE_REACHED))]
        prefix = a.instance_id if a.instance_id is not None else (a.client_id or "member")
        new_id = f"{prefix}-{self._ids()}"
        if a.instance_id is not None:
            old_id = group.instances.get(a.instance_id)
            if old_id is not None:
                return self._replace_static(now, token, group, group.members[old_id], new_id, a)
            return self._add(now, token, group, a, new_id)
        if a.require_id:
            group.pending[new_id] = now + a.session_ms / 1000
            self._wake(group, group.pending[new_id])
            return [(token, join_error(KafkaError.MEMBER_ID_REQUIRED, new_id))]
        return self._add(now, token, group, a, new_id)

    def _replace_static(
        self, now: float, token: int, group: Group, old: Member, new_id: str, a: JoinArgs
    ) -> list[Reply]:
        """A static member back with a new id (a restart): the old id is fenced."""
        out: list[Reply] = []
        for t in (old.join_token, old.sync_token):
            if t is not None:
                out.append((t, join_error(KafkaError.FENCED_INSTANCE_ID, old.member_id)))
        old.join_token = old.sync_token = None
        was_leader = group.leader == old.member_id
        del group.members[old.member_id]
        old.member_id = new_id
        group.members[new_id] = old
        group.instances[a.instance_id or ""] = new_id
        if was_leader:
            group.leader = new_id
        # As Kafka's coordinator: a static member back needs no rebalance while
        # the group's protocol is still among its own (its metadata may differ:
        # librdkafka's lists the partitions it owned, none after a restart).
        names = {n for n, _ in a.protocols}
        same = group.protocol in names and old.protocol_type == a.protocol_type
        self._refresh(old, a, now)
        if group.state == STABLE and same and not was_leader:
            return [*out, (token, join_answer(group, old, members=False))]
        if group.state == STABLE and same and a.can_skip:
            # The leader back: it gets the members, and keeps the assignment.
            return [*out, (token, join_answer(group, old, members=True, skip=True))]
        old.join_token = token
        return out + self._rebalance(group, now) + self._maybe_complete(group, now)

    def _add(
        self, now: float, token: int, group: Group, a: JoinArgs, member_id: str
    ) -> list[Reply]:
        if len(group.members) >= self.settings.members_max:
            return [(token, join_error(KafkaError.GROUP_MAX_SIZE_REACHED, member_id))]
        member = Member(
            member_id,
            a.instance_id,
            a.client_id,
            a.client_host,
            a.session_ms,
            a.rebalance_ms,
            a.protocol_type,
            list(a.protocols),
        )
        self._refresh(member, a, now)
        member.join_token = token
        group.members[member_id] = member
        if a.instance_id is not None:
            group.instances[a.instance_id] = member_id
        if group.state == PREPARING and group.not_before > now:
            # A member more during the initial delay: wait a little more.
            group.not_before = min(now + self.settings.initial_delay_s, group.rebalance_by)
            self._wake(group, group.not_before)
        return self._rebalance(group, now) + self._maybe_complete(group, now)

    def _rejoin(
        self, now: float, token: int, group: Group, member: Member, a: JoinArgs
    ) -> list[Reply]:
        same = member.protocols == list(a.protocols) and member.protocol_type == a.protocol_type
        self._refresh(member, a, now)
        out: list[Reply] = []
        if member.join_token is not None:  # joined twice: the first is answered by this one
            out.append((member.join_token, join_error(KafkaError.UNKNOWN_MEMBER_ID, "")))
        if group.state == STABLE and same and group.leader != member.member_id:
            member.join_token = None
            return [*out, (token, join_answer(group, member, members=False))]
        member.join_token = token
        return out + self._rebalance(group, now) + self._maybe_complete(group, now)

    def _refresh(self, member: Member, a: JoinArgs, now: float) -> None:
        member.protocols = list(a.protocols)
        member.protocol_type = a.protocol_type
        member.session_ms = a.session_ms
        member.rebalance_ms = a.rebalance_ms if a.rebalance_ms > 0 else a.session_ms
        member.client_id, member.client_host = a.client_id, a.client_host
        member.deadline = now + a.session_ms / 1000

    @staticmethod
    def _compatible(group: Group, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if protocol_type != next(iter(group.members.values())).protocol_type:
            return False
        names = {n for n, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in group.members.values())

    # -- rebalances ------------------------------------------------------------------

    def _rebalance(self, group: Group, now: float) -> list[Reply]:
        """Start a rebalance (no-op when one is under way)."""
        if group.state == PREPARING:
            return []
        out: list[Reply] = []
        for m in group.members.values():
            if m.sync_token is not None:
                out.append((m.sync_token, error(KafkaError.REBALANCE_IN_PROGRESS, assignment=b"")))
                m.sync_token = None
        was_empty = group.state == EMPTY
        group.state = PREPARING
        longest = max((m.rebalance_ms for m in group.members.values()), default=0) / 1000
        group.rebalance_by = now + longest
        group.not_before = now + self.settings.initial_delay_s if was_empty else now
        group.not_before = min(group.not_before, group.rebalance_by)
        self._wake(group, group.rebalance_by)
        self._wake(group, group.not_before)
        return out

    def _maybe_complete(self, group: Group, now: float) -> list[Reply]:
        if group.state != PREPARING:
            return []
        waiting = all(m.join_token is not None for m in group.members.values())
        if now < group.not_before or (now < group.rebalance_by and not waiting):
            return []
        for m in [m for m in group.members.values() if m.join_token is None]:
            self._drop(group, m)
        group.generation += 1
        if not group.members:
            group.state, group.protocol, group.leader = EMPTY, None, None
            self._stabilized.append(group.name)
            return []
        group.state = COMPLETING
        group.protocol_type = next(iter(group.members.values())).protocol_type
        group.protocol = choose_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        out: list[Reply] = []
        for m in group.members.values():
            m.assignment = b""
            m.deadline = now + m.session_ms / 1000
            assert m.join_token is not None
            out.append((m.join_token, join_answer(group, m, members=True)))
            m.join_token = None
        self._wake(group, min(m.deadline for m in group.members.values()))
        return out

    def _drop(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id is not None and group.instances.get(member.instance_id) == (
            member.member_id
        ):
            del group.instances[member.instance_id]

    def _remove(self, group: Group, member: Member, now: float) -> list[Reply]:
        """A member gone (session over, or left): the others rebalance."""
        out: list[Reply] = []
        if member.join_token is not None:
            out.append((member.join_token, join_error(KafkaError.UNKNOWN_MEMBER_ID)))
        if member.sync_token is not None:
            out.append((member.sync_token, error(KafkaError.UNKNOWN_MEMBER_ID, assignment=b"")))
        self._drop(group, member)
        if group.state in (STABLE, COMPLETING):
            out += self._rebalance(group, now)
        elif group.state == EMPTY:
            return out
        return out + self._maybe_complete(group, now)

    # -- syncs, heartbeats, leaves ---------------------------------------------------

    def _member(
        self, group_name: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group | None, Member | None, int]:
        """The group and member a request names, or the error that refuses it."""
        group = self.groups.get(group_name)
        if group is None:
            return None, None, KafkaError.UNKNOWN_MEMBER_ID
        if group.instances.get(instance_id or "", member_id) != member_id:
            return group, None, KafkaError.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return group, None, KafkaError.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return group, member, KafkaError.ILLEGAL_GENERATION
        return group, member, KafkaError.NONE

    def sync(
        self,
        now: float,
        token: int,
        group_name: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> list[Reply]:
        group, member, code = self._member(group_name, member_id, instance_id, generation)
        if code:
            return [(token, error(code, assignment=b""))]
        assert group is not None
        assert member is not None
        if group.state == PREPARING:
            return [(token, error(KafkaError.REBALANCE_IN_PROGRESS, assignment=b""))]
        member.deadline = max(member.deadline, now + member.session_ms / 1000)
        if group.state == STABLE:
            return [(token, sync_answer(group, member))]
        member.sync_token = token
        if member_id != group.leader:
            return []
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        group.state = STABLE
        self._stabilized.append(group.name)
        out: list[Reply] = []
        for m in group.members.values():
            if m.sync_token is not None:
                out.append((m.sync_token, sync_answer(group, m)))
                m.sync_token = None
        return out

    def take_stabilized(self) -> list[str]:
        """Groups that completed a generation since the last call."""
        out, self._stabilized = self._stabilized, []
        return out

    def heartbeat(
        self, now: float, group_name: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        group, member, code = self._member(group_name, member_id, instance_id, generation)
        if member is not None and code != KafkaError.FENCED_INSTANCE_ID:
            # Only later: the group's next look (``_expire``) is no later than it.
            member.deadline = now + member.session_ms / 1000
        if code:
            return code
        assert group is not None
        return KafkaError.REBALANCE_IN_PROGRESS if group.state == PREPARING else KafkaError.NONE

    def leave(
        self, now: float, group_name: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[list[int], list[Reply]]:
        """Members leave (``(member_id, instance_id)``, the member id may be
        empty for a static member): an error code each, and answers due."""
        group = self.groups.get(group_name)
        codes: list[int] = []
        out: list[Reply] = []
        for member_id, instance_id in leaving:
            if group is None:
                codes.append(KafkaError.UNKNOWN_MEMBER_ID)
                continue
            if instance_id is not None:
                known = group.instances.get(instance_id)
                if known is None or (member_id and known != member_id):
                    codes.append(
                        KafkaError.UNKNOWN_MEMBER_ID
                        if known is None
                        else KafkaError.FENCED_INSTANCE_ID
                    )
                    continue
                member_id = known
            member = group.members.get(member_id)
            if member is None:
                codes.append(KafkaError.UNKNOWN_MEMBER_ID)
                continue
            codes.append(KafkaError.NONE)
            out += self._remove(group, member, now)
        return codes, out

    # -- what the rest of the front asks ------------------------------------------------

    def check_commit(
        self, group_name: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        """The error a commit from this member gets (NONE: take it)."""
        group = self.groups.get(group_name)
        if generation < 0 and (group is None or not group.members):
            # No generation: an admin client's commit, or a consumer that
            # assigned itself its partitions (a KIP-848 one names itself,
            # joined to nothing).  Kafka takes it for a group without members.
            return KafkaError.NONE
        if generation < 0 and member_id == "":
            return KafkaError.UNKNOWN_MEMBER_ID  # a plain commit to a live group
        group, _member, code = self._member(group_name, member_id, instance_id, generation)
        if code:
            return code
        assert group is not None
        return KafkaError.REBALANCE_IN_PROGRESS if group.state == COMPLETING else KafkaError.NONE

    def state_of(self, group_name: str) -> str | None:
        group = self.groups.get(group_name)
        return None if group is None else group.state

    def forget(self, group_name: str) -> int:
        """Remove an empty group (DeleteGroups): NON_EMPTY_GROUP when it has members."""
        group = self.groups.get(group_name)
        if group is not None and group.members:
            return KafkaError.NON_EMPTY_GROUP
        self.groups.pop(group_name, None)
        return KafkaError.NONE

    def clear(self, which: Callable[[str], bool] | None = None) -> list[Reply]:
        """This coordinator no longer coordinates the groups ``which`` names
        (None: all): their waiting requests are answered NOT_COORDINATOR and
        the groups forgotten."""
        out: list[Reply] = []
        gone = [g for g in self.groups.values() if which is None or which(g.name)]
        for group in gone:
            del self.groups[group.name]
            for m in group.members.values():
                if m.join_token is not None:
                    out.append((m.join_token, join_error(KafkaError.NOT_COORDINATOR)))
                if m.sync_token is not None:
                    out.append((m.sync_token, error(KafkaError.NOT_COORDINATOR, assignment=b"")))
        if not self.groups:
            self._deadlines.clear()
        return out

    def snapshot(self, group_name: str) -> dict[str, Any] | None:
        """The group as the coordinator writes it down (None: not Stable)."""
        return snapshot(self.groups.get(group_name))

    def restore(self, now: float, group_name: str, snap: dict[str, Any]) -> None:
        """Take a group as an earlier coordinator wrote it down."""
        group = self.groups[group_name] = restore(now, group_name, snap)
        for m in group.members.values():
            self._wake(group, m.deadline)

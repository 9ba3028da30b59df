"""The group coordinator: a thin trio shell over the classic protocol's
core (``_classic.Coordinator``) and the consumer protocol's
(``_consumer.ConsumerCoordinator``), shared by a node's Kafka front and
logstrand's own readers (``_node``).  It speaks in values; the Kafka
front's ``_group_apis`` turns Kafka's requests into them and back.

Where a group lives
-------------------
A group's positions, and its membership record, are records of the
positions log (``positions``).  The coordinator of every group of a
positions log is the front of the node that runs that log's sequencer
(``ClusterView.sequencer_node``, as Metadata names partition leaders), so
the coordinator moves when the sequencer does.  FindCoordinator, asked of
any front, names it; the others answer NOT_COORDINATOR, and the client
asks again.

The coordinator keeps members in memory.  Each time a group completes a
generation (the leader's SyncGroup) or empties, it writes the group (its
generation, protocol, leader, members and their assignments) as the
group's membership record before it answers, so a front that becomes the
coordinator later reads the record back and goes on with the same
generation: members that are alive keep heartbeating, those that are gone
are dropped when their session ends.  A front that stops being the
coordinator answers every request that waits with NOT_COORDINATOR and
forgets its groups.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..errors import LogstrandError
from ..kafka_errors import KafkaError
from ..positions import GROUP_RE, POSITIONS_LOGS, positions_log_of
from ..transactions import TXN_ID_RE
from . import _mixed as mixed
from ._classic import Coordinator
from ._consumer import ConsumerCoordinator, heartbeat_ms_for
from ._model import (
    NATIVE_PREFIX,
    STABLE,
    JoinArgs,
    Reply,
    Settings,
    join_error,
    logs_spans,
    spans_logs,
)

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ..rpc import ClusterView


class CoordinatorHost(Protocol):
    """What the coordinator needs of where it runs: a Kafka front
    (``kafka.KafkaFront``), or a node (``_node``), whose Kafka front then
    shares it."""

    client: AsyncClient
    view: ClusterView
    broker_id: int
    standalone: bool

    def topics(self) -> dict[str, NamedLogs]: ...

    def brokers(self) -> dict[int, tuple[str, int]]: ...


_log = logging.getLogger("logstrand.kafka")
#: A waiting request is answered by then at the latest, past its own timeout.
WAIT_SLACK_S = 5.0


class GroupCoordinator:
    """The front's group coordinator (see the module docstring)."""

    def __init__(
        self, front: CoordinatorHost, settings: Settings | None = None, session_ms: int = 45_000
    ) -> None:
        self.front = front
        self.positions = front.client.groups
        self.core = Coordinator(settings)
        #: Groups of the consumer protocol (KIP-848, ``_group_heartbeat``).
        self.ccore = ConsumerCoordinator(session_ms, heartbeat_ms_for(session_ms))
        self._tokens = itertools.count(1)
        #: token -> [event, answer]: requests that wait (joins, syncs).
        self._waiting: dict[int, list[Any]] = {}
        self._changed = trio.Event()
        #: Positions logs whose groups were read back since this front became
        #: their coordinator.
        self._loaded: set[int] = set()
        #: The positions logs whose groups this front coordinates.
        self._mine: set[int] = set()
        #: A transaction's FindCoordinator was logged (once per front).
        self._said_transactions = False
        #: Transactional ids are served (``--kafka-transactions``): their
        #: coordinator is found as a group's of the same name would be.
        self.transactions = False
        #: The view's sequencer weights ``_mine`` was worked out from.
        self._mine_weights: object = None
        self._loading = {p: trio.Lock() for p in POSITIONS_LOGS}
        #: The logs of each subscription of logstrand's own readers, by the
        #: name it stands under as a topic (``native_topic``).
        self.native_logs: dict[str, tuple[int, ...]] = {}

    # -- who coordinates ------------------------------------------------------------

    def coordinator_of(self, group: str) -> int | None:
        """The broker id of ``group``'s coordinator (None: no node runs it)."""
        if self.front.standalone:
            return self.front.broker_id
        return self.front.view.sequencer_node(positions_log_of(group))

    def coordinates_log(self, log_id: int) -> bool:
        """Whether this front coordinates the groups of positions log ``log_id``."""
        return self.front.standalone or self.front.view.sequencer_node(log_id) == (
            self.front.broker_id
        )

    def _check_ownership(self) -> None:
        """Forget the groups of positions logs this front no longer coordinates
        (their sequencer moved): a coordinator that comes back reads them again."""
        # Asked on every group request: the sixteen owners are looked up
        # again only when the view's sequencer weights are a new object
        # (it keeps one while nothing they rest on changed).
        weights = None if self.front.standalone else self.front.view.sequencer_weights()
        if weights is not None and weights is self._mine_weights:
            return
        self._mine_weights = weights
        now_mine = {p for p in POSITIONS_LOGS if self.coordinates_log(p)}
        lost = self._mine - now_mine
        self._mine = now_mine
        if lost:
            self._deliver(self.core.clear(lambda g: positions_log_of(g) in lost))
            self.ccore.clear(lambda g: positions_log_of(g) in lost)
            self._loaded -= lost

    async def take(self, group: str) -> int:
        """Whether this front coordinates ``group`` now: NONE, after reading
        the groups of its positions log back if this front just became their
        coordinator, or the error to answer."""
        if not GROUP_RE.fullmatch(group):
            return KafkaError.INVALID_GROUP_ID
        self._check_ownership()
        home = positions_log_of(group)
        if home not in self._mine:
            return KafkaError.NOT_COORDINATOR
        if home in self._loaded:
            return KafkaError.NONE
        async with self._loading[home]:
            if home not in self._loaded:
                try:
                    table = await self.positions.refresh(home)
                except LogstrandError as exc:
                    _log.warning("kafka: group %s: positions not read: %s", group, exc)
                    return KafkaError.COORDINATOR_LOAD_IN_PROGRESS
                # One read of the log brings back every group it holds.
                for name, record in table.memberships.items():
                    if positions_log_of(name) == home and not self.holds(name):
                        self._restore(name, record)
                self._loaded.add(home)
        return KafkaError.NONE

    def _restore(self, group: str, record: bytes) -> None:
        try:
            snap = json.loads(record)
            if snap.get("type") == "consumer":
                self.ccore.restore(trio.current_time(), group, snap)
                for topic, spans in snap.get("logs", {}).items():
                    self.native_logs[topic] = spans_logs(spans)
            else:
                self.core.restore(trio.current_time(), group, snap)
        except (ValueError, KeyError, TypeError) as exc:
            _log.warning("kafka: group %s: membership record not read: %s", group, exc)

    def poke(self) -> None:
        """The timer task looks again (deadlines may have moved)."""
        self._changed.set()

    def holds(self, group: str) -> bool:
        """Whether this coordinator has ``group`` in memory (either protocol)."""
        return group in self.core.groups or group in self.ccore.groups

    def upgrade(self, name: str) -> int:
        """The classic group ``name``, which has members, as a consumer group
        of classic members (``_mixed``, rule 1): NONE, or the error a
        consumer-protocol member that asked gets (it retries)."""
        group = self.core.groups[name]
        if group.protocol_type != "consumer":
            return KafkaError.INCONSISTENT_GROUP_PROTOCOL
        if group.state != STABLE:  # joins or syncs wait in it: not now
            return KafkaError.COORDINATOR_LOAD_IN_PROGRESS
        mixed.upgrade(self.ccore, trio.current_time(), group)
        del self.core.groups[name]
        _log.info("kafka: group %s: a consumer-protocol member joined; now a consumer group", name)
        return KafkaError.NONE

    def maybe_downgrade(self, name: str) -> None:
        """A consumer group whose members are all classic now is a classic
        group again (``_mixed``, rule 5)."""
        cgroup = self.ccore.groups.get(name)
        if cgroup is None or not mixed.all_classic(cgroup):
            return
        group = mixed.downgrade(cgroup)
        del self.ccore.groups[name]
        # Written down once its members joined it (a classic group is written
        # when Stable); until then the record says consumer group, which a
        # coordinator that takes over serves the same.
        self._deliver(self.core.adopt(group, trio.current_time()))
        _log.info("kafka: group %s: only classic members left; a classic group again", name)

    def partitions_of(self, topic: str) -> int:
        if topic.startswith(NATIVE_PREFIX):  # a subscription to logs
            return int(topic.rsplit("/", 1)[1])
        r = self.front.topics().get(topic)
        return 0 if r is None else r.count

    # -- waiting and ticking ---------------------------------------------------------

    def _deliver(self, replies: list[Reply], *, poke: bool = True) -> None:
        """Answer the requests that waited; ``poke`` the timer task (the
        coordinator's deadlines may have moved)."""
        for token, body in replies:
            slot = self._waiting.pop(token, None)
            if slot is not None:
                slot[1] = body
                slot[0].set()
        if poke:
            self._changed.set()

    async def _wait(
        self, token: int, slot: list[Any], timeout_s: float, late: dict[str, Any]
    ) -> dict[str, Any]:
        with trio.move_on_after(timeout_s + WAIT_SLACK_S):
            await slot[0].wait()
        if not slot[0].is_set():
            self._waiting.pop(token, None)
            return late
        answer: dict[str, Any] = slot[1]
        return answer

    async def run(self) -> None:
        """Drop members whose session ended and complete rebalances on time,
        and write down groups that changed.  Until cancelled."""
        while True:
            times = [t for t in (self.core.next_deadline(), self.ccore.next_deadline()) if t]
            with trio.move_on_at(min(times, default=math.inf)):
                await self._changed.wait()
            self._changed = trio.Event()
            self._check_ownership()
            now = trio.current_time()
            self._deliver(self.core.tick(now), poke=False)
            for name in self.ccore.tick(now, self.partitions_of):
                self.maybe_downgrade(name)
            await self.write_down()

    async def write_down(self) -> None:
        """Write the membership record of every group that changed generation."""
        changed = [(g, self.core.snapshot(g)) for g in self.core.take_stabilized()]
        changed += [(g, self._with_logs(self.ccore.snapshot(g))) for g in self.ccore.take_changed()]
        for group, snap in changed:
            if snap is None or positions_log_of(group) not in self._mine:
                continue
            try:
                await self.positions.write_membership(group, json.dumps(snap).encode())
            except LogstrandError as exc:
                _log.warning("kafka: group %s: membership not written: %s", group, exc)

    def _with_logs(self, snap: dict[str, Any] | None) -> dict[str, Any] | None:
        """A consumer group's record, with the logs of its members'
        subscriptions to logs (a new coordinator and ``groups describe``
        read them there)."""
        if snap is not None:
            topics = {t for m in snap["members"] for t in m["topics"] if t in self.native_logs}
            if topics:
                snap["logs"] = {t: logs_spans(self.native_logs[t]) for t in sorted(topics)}
        return snap

    # -- the classic protocol's calls, in values (``kafka._group_apis`` translates) --

    async def join(self, args: JoinArgs) -> dict[str, Any]:
        """A JoinGroup: the answer in Kafka's shape, once the rebalance
        completes, or REBALANCE_IN_PROGRESS past the member's rebalance
        timeout."""
        code = await self.take(args.group)
        if code:
            return join_error(code, args.member_id)
        name = args.group
        # A consumer-protocol group: an empty one becomes a classic one again
        # (Kafka converts an empty group either way); one with members takes
        # the member as a classic member of its own (``_mixed``).
        if name in self.ccore.groups and self.ccore.forget(name) != KafkaError.NONE:
            answer = mixed.join(self.ccore, trio.current_time(), args, self.partitions_of)
            self.poke()
            await self.write_down()
            return answer
        token = next(self._tokens)
        slot = self._waiting[token] = [trio.Event(), None]
        self._deliver(self.core.join(trio.current_time(), token, args))
        late = join_error(KafkaError.REBALANCE_IN_PROGRESS, args.member_id)
        return await self._wait(token, slot, args.rebalance_ms / 1000, late)

    async def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> dict[str, Any]:
        """A SyncGroup: ``{"error_code", "assignment"}`` once the leader's
        assignment is written down."""
        code = await self.take(group)
        if code:
            return {"error_code": code, "assignment": b""}
        cgroup = self.ccore.groups.get(group)
        if cgroup is not None:  # a classic member of a consumer group
            return mixed.sync(cgroup, generation, member_id)
        token = next(self._tokens)
        slot = self._waiting[token] = [trio.Event(), None]
        replies = self.core.sync(
            trio.current_time(), token, group, generation, member_id, instance_id, assignments
        )
        # A generation is written down before any member hears of it.
        await self.write_down()
        self._deliver(replies)
        held = self.core.groups.get(group)
        timeout = max((m.rebalance_ms for m in held.members.values()), default=0) if held else 0
        late = {"error_code": KafkaError.REBALANCE_IN_PROGRESS, "assignment": b""}
        return await self._wait(token, slot, timeout / 1000, late)

    async def heartbeat(
        self, group: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        """A classic member's heartbeat: its error code."""
        code = await self.take(group)
        cgroup = self.ccore.groups.get(group)
        if not code and cgroup is not None:  # a classic member of a consumer group
            code = mixed.heartbeat(self.ccore, trio.current_time(), cgroup, generation, member_id)
            self.poke()
        elif not code:
            code = self.core.heartbeat(
                trio.current_time(), group, generation, member_id, instance_id
            )
        return code

    async def leave(
        self, group: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        """Members ``(member id, instance id)`` leave: the group's error
        code, or NONE and one code per member."""
        code = await self.take(group)
        if code:
            return code, []
        cgroup = self.ccore.groups.get(group)
        if cgroup is not None:  # classic members of a consumer group
            codes = mixed.leave(self.ccore, cgroup, leaving, self.partitions_of)
            replies: list[Reply] = []
        else:
            codes, replies = self.core.leave(trio.current_time(), group, leaving)
        self._deliver(replies)
        await self.write_down()
        return KafkaError.NONE, codes

    def find(self, key: str, key_type: int, brokers: dict[int, tuple[str, int]]) -> dict[str, Any]:
        """FindCoordinator's entry for ``key``: a group (``key_type`` 0) or
        a transactional id (1), whose coordinator is the same positions
        log's."""
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type == 1 and self.transactions:
            self._found(entry, key, TXN_ID_RE.fullmatch(key) is not None, brokers)
        elif key_type != 0:
            # Not COORDINATOR_NOT_AVAILABLE, which clients retry until
            # their timeout (and this warning came twice a second), nor
            # UNSUPPORTED_VERSION (librdkafka retries any error but one):
            # what Kafka answers where an ACL denies the transactional
            # id, the way a Kafka cluster turns transactions off, and
            # every client takes as final at once.
            if not self._said_transactions:
                self._said_transactions = True
                _log.warning("kafka: FindCoordinator for a transaction (%r): not served", key)
            entry["error_code"] = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            entry["error_message"] = "transactions are not served by this cluster"
        else:
            self._found(entry, key, GROUP_RE.fullmatch(key) is not None, brokers)
        return entry

    def _found(
        self, entry: dict[str, Any], key: str, valid: bool, brokers: dict[int, tuple[str, int]]
    ) -> None:
        """``entry`` names the coordinator of ``key`` (a group, or a
        transactional id: the same positions log's)."""
        if not valid:
            entry["error_code"] = KafkaError.INVALID_GROUP_ID
            return
        node = self.coordinator_of(key)
        if node is None or node not in brokers:
            entry["error_code"] = KafkaError.COORDINATOR_NOT_AVAILABLE
        else:
            entry.update(error_code=0, node_id=node, host=brokers[node][0], port=brokers[node][1])

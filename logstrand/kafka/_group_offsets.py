"""Kafka's committed offsets and group administration, as positions.

A Kafka commit of offset *o* on a partition is a position (docs/groups.md)
of the group on the partition's log: processed up to the LSN just below
the record with offset *o*, so that a native reader of the group starts
at that record.  The position keeps the Kafka offset and its metadata
string as given, and OffsetFetch gives them back; a position committed
natively is shown as the offset of the record after it.  All of a
request's commits go to the positions log as one batch.

The coordinator (``groups._coordinator``) checks a commit against the group's
generation first; ListGroups lists the groups this front coordinates (a
Kafka admin client asks every broker), DescribeGroups shows their members
and assignments, DeleteGroups removes an empty group's positions and
OffsetDelete the positions of topics the group no longer subscribes to.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..errors import LogstrandError, NotFoundError
from ..groups import EMPTY, encode_assignment, encode_subscription, subscribed_topics
from ..kafka_errors import KafkaError
from ..positions import METADATA_MAX, POSITIONS_LOGS, positions_log_of, txn_positions_key
from ..types import lsn_epoch

if TYPE_CHECKING:
    from ..groups import GroupCoordinator
    from ..positions import Position
    from ._group_apis import GroupFront
    from ._protocol import Request


_log = logging.getLogger("logstrand.kafka")


class _Empty:
    state = EMPTY


class GroupAdmin:
    """OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups,
    DeleteGroups (see the module docstring)."""

    def __init__(self, front: GroupFront, coordinator: GroupCoordinator) -> None:
        self.front = front
        self.coordinator = coordinator
        self.positions = front.client.groups

    async def _may_read(self, request: Request, log_id: int) -> bool:
        """Whether the request's user may read ``log_id`` (secure mode); the
        partition is known already, so it is not looked up again."""
        return bool(await self.front.auth.may(request, "read", log_id))

    # -- commits ----------------------------------------------------------------------

    async def _lsn_below(self, log_id: int, offset: int) -> int:
        """The LSN a position for Kafka offset ``offset`` holds: the one just
        below the record with that offset (0 for offset 0 or less)."""
        if offset <= 0:
            return 0
        m = await self.front.data.offsets(log_id, 0)
        return 0 if m is None else max(0, m.lsn_at(offset) - 1)

    async def offset_commit(self, request: Request) -> dict[str, Any]:
        b = request.body
        group = b["group_id"]
        code = await self._may_commit(
            group, b.get("generation_id_or_member_epoch", -1), b.get("member_id", ""), b
        )
        topics, entries, taken = await self._entries(request, code)
        if entries:
            try:
                await self.positions.commit_many(group, entries)
            except LogstrandError:
                for out in taken:
                    out["error_code"] = KafkaError.COORDINATOR_NOT_AVAILABLE
        return {"throttle_time_ms": 0, "topics": topics}

    async def txn_offset_commit(self, request: Request) -> dict[str, Any]:
        """TxnOffsetCommit: the positions a transaction commits, held in the
        group's positions log under the producer's key until the transaction
        ends (``groups._txns``); a later commit of the same transaction adds to
        them."""
        b = request.body
        group, pid, epoch = b["group_id"], b["producer_id"], b["producer_epoch"]
        code: int = KafkaError.NONE if self.front.transactions else KafkaError.UNSUPPORTED_VERSION
        if request.version >= 3:  # KIP-447: checked against the group's generation
            code = code or await self._may_commit(group, b["generation_id"], b["member_id"], b)
        else:  # before, a transactional producer names no member
            code = code or await self.coordinator.take(group)
        topics, entries, taken = await self._entries(request, code)
        if not entries:
            return {"throttle_time_ms": 0, "topics": topics}
        try:
            table = await self.positions.refresh(positions_log_of(group))
            held = table.txn_positions.get((group, pid))
            doc = json.loads(held) if held is not None else None
            kept = doc["positions"] if doc is not None and doc["epoch"] == epoch else []
            new = {log for log, *_ in entries}
            doc = {
                "epoch": epoch,
                "positions": [x for x in kept if x[0] not in new] + [list(e) for e in entries],
            }
            key = txn_positions_key(group, pid)
            await self.positions.appender.append(
                positions_log_of(group), json.dumps(doc).encode(), key
            )
        except (LogstrandError, ValueError, KeyError) as exc:
            for out in taken:
                out["error_code"] = KafkaError.COORDINATOR_NOT_AVAILABLE
            _log.warning("kafka: group %s: transaction's positions not written: %s", group, exc)
        return {"throttle_time_ms": 0, "topics": topics}

    async def _may_commit(
        self, group: str, generation: int, member_id: str, body: dict[str, Any]
    ) -> int:
        """Whether a commit for ``group`` is this front's to take, from a
        member of its current generation: NONE, or the error."""
        code = await self.coordinator.take(group)
        if not code and group in self.coordinator.ccore.groups and member_id:
            return int(self.coordinator.ccore.check_commit(group, member_id, generation))
        if not code:
            return int(
                self.coordinator.core.check_commit(
                    group, generation, member_id, body.get("group_instance_id")
                )
            )
        return code

    async def _entries(self, request: Request, code: int) -> tuple[list[Any], list[Any], list[Any]]:
        """The request's topics as answers (each partition with ``code`` or
        its own refusal), the positions to commit, and the answers of
        those."""
        topics: list[dict[str, Any]] = []
        entries: list[tuple[int, int, int | None, str | None]] = []
        taken: list[dict[str, Any]] = []
        for t in request.body["topics"]:
            parts = []
            for p in t["partitions"]:
                out = {"partition_index": p["partition_index"], "error_code": code}
                parts.append(out)
                if code:
                    continue
                r, log_id = await self.front.data.partition(t["name"], p["partition_index"])
                metadata = p["committed_metadata"]
                if r is None:
                    out["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
                elif not await self._may_read(request, log_id):
                    out["error_code"] = KafkaError.TOPIC_AUTHORIZATION_FAILED
                elif metadata is not None and len(metadata.encode()) > METADATA_MAX:
                    out["error_code"] = KafkaError.OFFSET_METADATA_TOO_LARGE
                else:
                    offset = p["committed_offset"]
                    lsn = await self._lsn_below(log_id, offset)
                    entries.append((log_id, lsn, offset, metadata))
                    taken.append(out)
            topics.append({"name": t["name"], "partitions": parts})
        return topics, entries, taken

    # -- fetches ----------------------------------------------------------------------

    def _held_logs(self, group: str) -> set[int]:
        """The logs of the positions transactions hold for ``group``, from
        the table ``of_group`` just read."""
        table = self.positions.tables[positions_log_of(group)]
        logs: set[int] = set()
        for (name, _pid), held in table.txn_positions.items():
            if name == group:
                try:
                    logs.update(int(x[0]) for x in json.loads(held)["positions"])
                except (ValueError, KeyError, TypeError, IndexError):
                    continue
        return logs

    def _where(self, log_id: int) -> tuple[str, int] | None:
        """(topic, partition) of a log, if a topic holds it: its range's name
        from the view's index of ranges, not a walk over every topic."""
        name = self.front.view.range_name(log_id)
        topic = None if name is None else self.front.topics().get(name)
        index = None if topic is None else topic.index(log_id)
        return None if name is None or index is None else (name, index)

    async def _offset_of(self, position: Position) -> int:
        if position.offset is not None:
            return position.offset
        m = await self.front.data.offsets(position.log_id, lsn_epoch(position.lsn), wait_s=1.0)
        return -1 if m is None else m.next_offset(position.lsn)

    async def _fetch_group(
        self, request: Request, group: str, wanted: list[dict[str, Any]] | None
    ) -> tuple[int, list[dict[str, Any]]]:
        code = await self.coordinator.take(group)
        if code:
            return code, []
        try:
            mine = {p.log_id: p for p in await self.positions.of_group(group)}
        except LogstrandError:
            return KafkaError.COORDINATOR_LOAD_IN_PROGRESS, []
        # KIP-447: a read_committed consumer asks for stable offsets only; a
        # partition whose position a transaction holds (committed, not yet
        # written as a position, or not yet ended) is UNSTABLE_OFFSET_COMMIT,
        # which the consumer asks again.
        unstable = self._held_logs(group) if request.body.get("require_stable") else set()
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for log_id in mine:
                where = self._where(log_id)
                if where is not None:
                    by_topic.setdefault(where[0], []).append(where[1])
            wanted = [{"name": n, "partition_indexes": sorted(i)} for n, i in by_topic.items()]
        topics = []
        for t in wanted:
            parts = []
            for index in t["partition_indexes"]:
                r, log_id = await self.front.data.partition(t["name"], index)
                if r is not None and not await self._may_read(request, log_id):
                    parts.append(
                        {
                            "partition_index": index,
                            "committed_offset": -1,
                            "metadata": "",
                            "error_code": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                        }
                    )
                    continue
                position = mine.get(log_id) if r is not None else None
                offset = -1 if position is None else await self._offset_of(position)
                metadata = "" if position is None else position.metadata or ""
                parts.append(
                    {
                        "partition_index": index,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "metadata": metadata,
                        "error_code": KafkaError.UNSTABLE_OFFSET_COMMIT
                        if r is not None and log_id in unstable
                        else 0,
                    }
                )
            topics.append({"name": t["name"], "partitions": parts})
        return KafkaError.NONE, topics

    async def offset_fetch(self, request: Request) -> dict[str, Any]:
        b = request.body
        if request.version < 8:
            code, topics = await self._fetch_group(request, b["group_id"], b["topics"])
            return {"throttle_time_ms": 0, "topics": topics, "error_code": code}
        groups = []
        for g in b["groups"]:
            code, topics = await self._fetch_group(request, g["group_id"], g["topics"])
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": code})
        return {"throttle_time_ms": 0, "groups": groups}

    # -- groups -----------------------------------------------------------------------

    async def list_groups(self, request: Request) -> dict[str, Any]:
        me = self.front.broker_id
        logs = [p for p in POSITIONS_LOGS if self.coordinator.coordinates_log(p)]
        names = set(self.coordinator.core.groups) | set(self.coordinator.ccore.groups)
        try:
            names |= set(await self.positions.positions(logs))
            for log_id in logs:
                names |= set(self.positions.tables[log_id].memberships)
        except LogstrandError:
            return {"error_code": KafkaError.COORDINATOR_NOT_AVAILABLE, "groups": []}
        wanted_states = {s.lower() for s in request.body.get("states_filter") or []}
        groups = []
        for name in sorted(names):
            if self.coordinator.coordinator_of(name) != me:
                continue
            group = self.coordinator.core.groups.get(name)
            cgroup = self.coordinator.ccore.groups.get(name)
            state = (group or cgroup or _Empty).state
            if wanted_states and state.lower() not in wanted_states:
                continue
            kind = (group.protocol_type if group is not None else None) or "consumer"
            groups.append(
                {
                    "group_id": name,
                    "protocol_type": kind,
                    "group_state": state,
                    "group_type": "consumer" if cgroup is not None else "classic",
                }
            )
        return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}

    async def describe_groups(self, request: Request) -> dict[str, Any]:
        out = []
        for name in request.body["groups"]:
            entry: dict[str, Any] = {"group_id": name, "members": [], "protocol_data": ""}
            code = await self.coordinator.take(name)
            group = self.coordinator.core.groups.get(name)
            cgroup = self.coordinator.ccore.groups.get(name)
            entry["error_code"] = code
            if code:
                entry.update(group_state="", protocol_type="")
            elif cgroup is not None:
                entry.update(group_state=cgroup.state, protocol_type="consumer")
                entry["protocol_data"] = "uniform"
                entry["members"] = [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": encode_subscription(sorted(m.topics)),
                        "member_assignment": encode_assignment(sorted(m.given)),
                    }
                    for m in cgroup.members.values()
                ]
            elif group is None:
                known = bool(await self.positions.of_group(name))
                entry.update(group_state=EMPTY if known else "Dead", protocol_type="")
            else:
                entry.update(
                    group_state=group.state,
                    protocol_type=group.protocol_type or "",
                    protocol_data=group.protocol or "",
                )
                entry["members"] = [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata(group.protocol or ""),
                        "member_assignment": m.assignment,
                    }
                    for m in group.members.values()
                ]
            out.append(entry)
        return {"throttle_time_ms": 0, "groups": out}

    async def delete_groups(self, request: Request) -> dict[str, Any]:
        results = []
        for name in request.body["groups_names"]:
            code = await self.coordinator.take(name)
            if not code:
                code = self.coordinator.core.forget(name) or self.coordinator.ccore.forget(name)
            if not code:
                try:
                    await self.positions.delete(name)
                except NotFoundError:
                    code = KafkaError.GROUP_ID_NOT_FOUND
                except LogstrandError:
                    code = KafkaError.COORDINATOR_NOT_AVAILABLE
            results.append({"group_id": name, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}

    async def offset_delete(self, request: Request) -> dict[str, Any]:
        b = request.body
        name = b["group_id"]
        code = await self.coordinator.take(name)
        group = self.coordinator.core.groups.get(name)
        subscribed: set[str] = set()
        if group is not None and group.protocol_type == "consumer":
            for m in group.members.values():
                subscribed |= subscribed_topics(m.metadata(group.protocol or ""))
        topics, logs = [], []
        for t in b["topics"]:
            parts = []
            for p in t["partitions"]:
                c = code or (KafkaError.GROUP_SUBSCRIBED_TO_TOPIC if t["name"] in subscribed else 0)
                if not c:
                    r, log_id = await self.front.data.partition(t["name"], p["partition_index"])
                    if r is None:
                        c = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
                    elif not await self._may_read(request, log_id):  # Kafka: READ on the topic
                        c = KafkaError.TOPIC_AUTHORIZATION_FAILED
                    else:
                        logs.append(log_id)
                parts.append({"partition_index": p["partition_index"], "error_code": c})
            topics.append({"name": t["name"], "partitions": parts})
        if code:
            return {"error_code": code, "throttle_time_ms": 0, "topics": []}
        if logs:
            try:
                await self.positions.forget(name, logs)
            except LogstrandError:
                return {"error_code": KafkaError.COORDINATOR_NOT_AVAILABLE, "topics": []}
        return {"error_code": 0, "throttle_time_ms": 0, "topics": topics}

"""Kafka's classic group APIs (FindCoordinator, JoinGroup, Heartbeat,
LeaveGroup, SyncGroup) translated for the group coordinator
(``groups.GroupCoordinator``), which speaks in values: a request's fields
become its arguments, by the request's version, and its answer becomes the
response of that version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..groups import CoordinatorHost, GroupCoordinator, JoinArgs
from ..kafka_errors import KafkaError

if TYPE_CHECKING:
    from ._auth import FrontAuth
    from ._data import DataPlane
    from ._protocol import Request


class GroupFront(CoordinatorHost, Protocol):
    """What the group APIs need of the front (``KafkaFront``)."""

    data: DataPlane
    auth: FrontAuth
    coordinator: GroupCoordinator
    #: Transactions are served (``--kafka-transactions``).
    transactions: bool


class GroupApis:
    """The five APIs, as handlers of the front's table."""

    def __init__(self, front: GroupFront) -> None:
        self.front = front

    async def join_group(self, request: Request) -> dict[str, Any]:
        b = request.body
        rebalance_ms = b["rebalance_timeout_ms"]
        args = JoinArgs(
            b["group_id"],
            b["member_id"],
            b.get("group_instance_id"),
            b["session_timeout_ms"],
            rebalance_ms if rebalance_ms > 0 else b["session_timeout_ms"],
            b["protocol_type"],
            [(p["name"], p["metadata"]) for p in b["protocols"]],
            client_id=request.client_id or "",
            client_host=getattr(request.conn, "peer", ""),
            # v4 answers MEMBER_ID_REQUIRED to a first join; v9 lets a
            # static member skip the rebalance its rejoin would start.
            require_id=request.version >= 4,
            can_skip=request.version >= 9,
        )
        return await self.front.coordinator.join(args)

    async def sync_group(self, request: Request) -> dict[str, Any]:
        b = request.body
        assignments = {a["member_id"]: a["assignment"] for a in b["assignments"]}
        return await self.front.coordinator.sync(
            b["group_id"],
            b["generation_id"],
            b["member_id"],
            b.get("group_instance_id"),
            assignments,
        )

    async def heartbeat(self, request: Request) -> dict[str, Any]:
        b = request.body
        code = await self.front.coordinator.heartbeat(
            b["group_id"], b["generation_id"], b["member_id"], b.get("group_instance_id")
        )
        return {"error_code": code}

    async def leave_group(self, request: Request) -> dict[str, Any]:
        b = request.body
        # v3 made LeaveGroup a batch of members (KIP-345); before, one.
        leaving: list[tuple[str, str | None]] = (
            [(m["member_id"], m.get("group_instance_id")) for m in b["members"]]
            if request.version >= 3
            else [(b["member_id"], None)]
        )
        code, codes = await self.front.coordinator.leave(b["group_id"], leaving)
        if code:
            return {"error_code": code, "members": []}
        members = [
            {"member_id": m, "group_instance_id": i, "error_code": c}
            for (m, i), c in zip(leaving, codes, strict=True)
        ]
        top = codes[0] if request.version < 3 else KafkaError.NONE
        return {"error_code": top, "members": members}

    async def find_coordinator(self, request: Request) -> dict[str, Any]:
        b = request.body
        # v4 asks for many keys at once (KIP-699); before, one.
        keys = b["coordinator_keys"] if request.version >= 4 else [b["key"]]
        brokers = self.front.brokers()
        key_type = b.get("key_type", 0)
        found = [self.front.coordinator.find(key, key_type, brokers) for key in keys]
        if request.version >= 4:
            return {"throttle_time_ms": 0, "coordinators": found}
        one = found[0]
        return {"throttle_time_ms": 0, **{k: v for k, v in one.items() if k != "key"}}

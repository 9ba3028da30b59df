"""Consumer groups as a resource of grants on the Kafka front, in secure mode.

Kafka checks an operation on the GROUP resource for every group API, and so
does the front, before the API's handler sees the group (``security.
GroupGrant``: a group, ``PREFIX*`` or ``*``; admin on every log covers every
group):

========================  ==========  =======================================
API                        operation   a refused group gets
========================  ==========  =======================================
JoinGroup, SyncGroup,      read        GROUP_AUTHORIZATION_FAILED
Heartbeat, LeaveGroup,
OffsetCommit,
ConsumerGroupHeartbeat
OffsetFetch,               describe    GROUP_AUTHORIZATION_FAILED, per group
DescribeGroups,                        (the others are answered)
ConsumerGroupDescribe,
FindCoordinator (groups)
DeleteGroups, OffsetDelete delete      GROUP_AUTHORIZATION_FAILED, per group
ListGroups                 describe    left out of the list
========================  ==========  =======================================

A handler is given only the groups the user may touch; the refused ones
are answered here and put back in the order asked.  Topics are checked by
the handlers as before (read on each partition an offset is committed,
fetched or deleted for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ..groups import join_error
from ..kafka_errors import KafkaError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._auth import FrontAuth
    from ._protocol import Request

    Handler = Callable[[Request], Awaitable[dict[str, Any] | None]]

REFUSED = KafkaError.GROUP_AUTHORIZATION_FAILED
_WHY = "this user has no grant on the group (logstrand acl grant USER --group ...)"


def _one(op: str, refused: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """An API of one group (``group_id``): all or nothing."""

    async def gate(auth: FrontAuth, request: Request, handler: Handler) -> dict[str, Any] | None:
        if await auth.may_group(request, op, request.body["group_id"]):
            return await handler(request)
        return refused(request.body)

    return gate


def _commit_refused(b: dict[str, Any]) -> dict[str, Any]:
    topics = [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": REFUSED}
                for p in t["partitions"]
            ],
        }
        for t in b["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _many(op: str, field: str, out_field: str, refused: Callable[[str], dict[str, Any]]) -> Any:
    """An API of many groups (``field``, a list of names or of entries with
    ``group_id``): the handler answers those granted, this the others, in
    the order asked."""

    def name(entry: Any) -> str:
        return entry["group_id"] if isinstance(entry, dict) else str(entry)

    async def gate(auth: FrontAuth, request: Request, handler: Handler) -> dict[str, Any] | None:
        asked = request.body[field]
        allowed = [e for e in asked if await auth.may_group(request, op, name(e))]
        if len(allowed) == len(asked):
            return await handler(request)
        answer: dict[str, Any] = {"throttle_time_ms": 0, out_field: []}
        if allowed:
            body = {**request.body, field: allowed}
            answer = await handler(attrs.evolve(request, body=body)) or answer
        given = {name(e): e for e in answer[out_field]}
        answer[out_field] = [given.get(name(e)) or refused(name(e)) for e in asked]
        return answer

    return gate


def _describe_refused(group: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "error_code": REFUSED,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }


async def _offset_fetch(auth: FrontAuth, request: Request, handler: Handler) -> Any:
    if request.version >= 8:
        gate = _many(
            "describe",
            "groups",
            "groups",
            lambda g: {"group_id": g, "topics": [], "error_code": REFUSED},
        )
        return await gate(auth, request, handler)
    if await auth.may_group(request, "describe", request.body["group_id"]):
        return await handler(request)
    return {"throttle_time_ms": 0, "topics": [], "error_code": REFUSED}


async def _find_coordinator(auth: FrontAuth, request: Request, handler: Handler) -> Any:
    """Group keys the user may not describe are answered as refused (keys of
    transactions are the handler's)."""
    answer = await handler(request)
    if answer is None or request.body.get("key_type", 0) != 0:
        return answer
    if request.version >= 4:
        for entry in answer["coordinators"]:
            if not await auth.may_group(request, "describe", entry["key"]):
                entry.update(error_code=REFUSED, error_message=_WHY, node_id=-1, host="", port=-1)
    elif not await auth.may_group(request, "describe", request.body["key"]):
        answer.update(error_code=REFUSED, error_message=_WHY, node_id=-1, host="", port=-1)
    return answer


async def _list_groups(auth: FrontAuth, request: Request, handler: Handler) -> Any:
    answer = await handler(request)
    if answer is not None:
        answer["groups"] = [
            g for g in answer["groups"] if await auth.may_group(request, "describe", g["group_id"])
        ]
    return answer


#: API key -> how its groups are checked.
GATES: dict[int, Any] = {
    8: _one("read", _commit_refused),
    9: _offset_fetch,
    10: _find_coordinator,
    11: _one("read", lambda b: join_error(REFUSED, b["member_id"])),
    12: _one("read", lambda b: {"error_code": REFUSED}),
    13: _one("read", lambda b: {"error_code": REFUSED, "members": []}),
    14: _one("read", lambda b: {"error_code": REFUSED, "assignment": b""}),
    15: _many("describe", "groups", "groups", _describe_refused),
    16: _list_groups,
    42: _many(
        "delete", "groups_names", "results", lambda g: {"group_id": g, "error_code": REFUSED}
    ),
    47: _one("delete", lambda b: {"error_code": REFUSED, "throttle_time_ms": 0, "topics": []}),
    68: _one(
        "read",
        lambda b: {"error_code": REFUSED, "error_message": _WHY, "member_id": b["member_id"]},
    ),
    69: _many(
        "describe",
        "group_ids",
        "groups",
        lambda g: {"group_id": g, "error_code": REFUSED, "error_message": _WHY, "members": []},
    ),
}


def gated(auth: FrontAuth, api_key: int, handler: Handler) -> Handler:
    """``handler`` behind the group check of its API (itself when it has none,
    or when the front is not secure)."""
    gate = GATES.get(api_key)
    if gate is None or not auth.secure:
        return handler

    async def checked(request: Request) -> dict[str, Any] | None:
        answer: dict[str, Any] | None = await gate(auth, request, handler)
        return answer

    return checked

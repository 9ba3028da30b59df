"""Transactional ids as a resource of grants on the Kafka front, in secure
mode (``security.TxnGrant``: an id, ``PREFIX*`` or ``*``; admin on every log
covers every id), checked before an API's handler sees the id, as Kafka
checks its TRANSACTIONAL_ID resource:

==========================  ==========  ==================================
API                          operation   a refused id gets
==========================  ==========  ==================================
InitProducerId (with an id)  write       TRANSACTIONAL_ID_AUTHORIZATION_FAILED
AddPartitionsToTxn           write       the same, for every partition
AddOffsetsToTxn, EndTxn      write       the same
TxnOffsetCommit              write       the same, for every partition
FindCoordinator (key_type 1) describe    the same, per key
==========================  ==========  ==================================

The group a transaction commits offsets for, and the topics it writes to,
are checked as before (``_group_gate``, the handlers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kafka_errors import KafkaError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._auth import FrontAuth
    from ._protocol import Request

    Handler = Callable[[Request], Awaitable[dict[str, Any] | None]]

REFUSED = int(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
_WHY = (
    "this user has no grant on the transactional id "
    "(logstrand acl grant USER --transactional-id ...)"
)


def _init(b: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": REFUSED, "producer_id": -1, "producer_epoch": -1}


def _add_partitions(b: dict[str, Any]) -> dict[str, Any]:
    topics = [
        {
            "name": t["name"],
            "results_by_partition": [
                {"partition_index": i, "partition_error_code": REFUSED} for i in t["partitions"]
            ],
        }
        for t in b["v3_and_below_topics"] or ()
    ]
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": topics}


def _offsets(b: dict[str, Any]) -> dict[str, Any]:
    topics = [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": REFUSED}
                for p in t["partitions"]
            ],
        }
        for t in b["topics"] or ()
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _plain(b: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": REFUSED}


#: API key -> (the body's field with the id, the answer to a refused id).
_ONE: dict[int, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    22: ("transactional_id", _init),
    24: ("v3_and_below_transactional_id", _add_partitions),
    25: ("transactional_id", _plain),
    26: ("transactional_id", _plain),
    28: ("transactional_id", _offsets),
}


async def _find_coordinator(auth: FrontAuth, request: Request, handler: Handler) -> Any:
    """Transactional ids the user may not describe are answered as refused
    (group keys are ``_group_gate``'s)."""
    answer = await handler(request)
    if answer is None or request.body.get("key_type", 0) != 1:
        return answer
    entries = answer["coordinators"] if request.version >= 4 else [answer]
    keys = request.body["coordinator_keys"] if request.version >= 4 else [request.body["key"]]
    for entry, key in zip(entries, keys, strict=True):
        if not await auth.may_txn(request, "describe", key):
            entry.update(error_code=REFUSED, error_message=_WHY, node_id=-1, host="", port=-1)
    return answer


def txn_gated(auth: FrontAuth, api_key: int, handler: Handler) -> Handler:
    """``handler`` behind the transactional id check of its API (itself when
    it has none, or when the front is not secure)."""
    if not auth.secure or (api_key not in _ONE and api_key != 10):
        return handler
    if api_key == 10:

        async def found(request: Request) -> dict[str, Any] | None:
            answer: dict[str, Any] | None = await _find_coordinator(auth, request, handler)
            return answer

        return found
    field, refused = _ONE[api_key]

    async def checked(request: Request) -> dict[str, Any] | None:
        txn_id = request.body.get(field)
        if txn_id is None and api_key == 22:
            return await handler(request)  # an idempotent producer's: no id
        if txn_id is None or not await auth.may_txn(request, "write", txn_id):
            return refused(request.body)
        return await handler(request)

    return checked

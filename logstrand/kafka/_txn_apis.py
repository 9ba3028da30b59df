"""Kafka's transaction APIs (InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) over the front's transaction
coordinator (``groups._txns``): topics and partitions turned into logs, the
checks a request gets, and the answers in Kafka's shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kafka_errors import KafkaError
from ..transactions import TxnError

if TYPE_CHECKING:
    from ..groups import TxnFront
    from ._group_apis import GroupFront
    from ._protocol import Request


class TxnApis:
    """The APIs (see the module docstring)."""

    def __init__(self, front: GroupFront, txns: TxnFront) -> None:
        self.front = front
        self.txns = txns

    async def init_producer_id(self, request: Request) -> dict[str, Any]:
        """InitProducerId with a transactional id (``TxnFront.init``)."""
        b = request.body
        code, txn = await self.txns.init(
            b["transactional_id"],
            b["transaction_timeout_ms"],
            b.get("producer_id", -1),
            b.get("producer_epoch", -1),
        )
        pid, epoch = (-1, -1) if code or txn is None else (txn.producer_id, txn.producer_epoch)
        return {
            "throttle_time_ms": 0,
            "error_code": _for_version(request, code),
            "producer_id": pid,
            "producer_epoch": epoch,
        }

    async def add_partitions(self, request: Request) -> dict[str, Any]:
        """AddPartitionsToTxn, v0-3 (a producer's; v4's batches are brokers')."""
        b = request.body
        topics = b["v3_and_below_topics"]
        txn_id = b["v3_and_below_transactional_id"]
        code = await self.txns.take(txn_id)
        logs: set[int] = set()
        errors: dict[tuple[str, int], int] = {}
        for t in topics if not code else ():
            for index in t["partitions"]:
                r, log_id = await self.front.data.partition(t["name"], index)
                if r is None:
                    errors[t["name"], index] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
                elif not await self.front.data.may(request, "append", t["name"], index):
                    errors[t["name"], index] = KafkaError.TOPIC_AUTHORIZATION_FAILED
                else:
                    logs.add(log_id)
        if not code and not errors:
            code = await self.txns.add(
                txn_id, b["v3_and_below_producer_id"], b["v3_and_below_producer_epoch"], logs
            )
        # One partition refused: the others were not added (Kafka's answer).
        other = KafkaError.OPERATION_NOT_ATTEMPTED if errors else _for_version(request, code)
        results = [
            {
                "name": t["name"],
                "results_by_partition": [
                    {
                        "partition_index": i,
                        "partition_error_code": errors.get((t["name"], i), other),
                    }
                    for i in t["partitions"]
                ],
            }
            for t in topics
        ]
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}

    async def add_offsets(self, request: Request) -> dict[str, Any]:
        """AddOffsetsToTxn: the transaction commits positions of a group."""
        b = request.body
        txn_id, group = b["transactional_id"], b["group_id"]
        if not await self.front.auth.may_group(request, "read", group):
            code: int = KafkaError.GROUP_AUTHORIZATION_FAILED
        else:
            code = await self.txns.add(
                txn_id, b["producer_id"], b["producer_epoch"], set(), frozenset({group})
            )
        return {"throttle_time_ms": 0, "error_code": _for_version(request, code)}

    async def end_txn(self, request: Request) -> dict[str, Any]:
        """EndTxn (``TxnFront.end``)."""
        b = request.body
        code = await self.txns.end(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["committed"]
        )
        return {"throttle_time_ms": 0, "error_code": _for_version(request, code)}


#: The first version of each API that may be answered PRODUCER_FENCED
#: (KIP-588); an older client knows the fencing as INVALID_PRODUCER_EPOCH,
#: and takes 90 for an unknown error (aiokafka did: UnknownError).
_FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def _for_version(request: Request, code: int) -> int:
    if code == TxnError.PRODUCER_FENCED and request.version < _FENCED_FROM.get(request.api_key, 0):
        return int(TxnError.INVALID_PRODUCER_EPOCH)
    return code

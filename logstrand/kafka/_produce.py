"""Produce: each partition's records appended with one ``append_batch``
(the partitions of a request in parallel), answered with the Kafka offset
of the first (``_offsets``).  acks=1 and acks=all are the same here: an
append is acknowledged once R copies are stored, which is what acks=all
asks.  acks=0 gets no answer, as in Kafka.

Every record keeps its headers and the CreateTime its producer gave it, as
the record's extras (``batch.pack_extra``), which native readers see too.
A batch of an idempotent or transactional producer is stored numbered
(producer id, base sequence), so that a retry is stored once; control
batches are the coordinator's to write, never a producer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ..errors import (
    DuplicateAppendError,
    InvalidArgumentError,
    LogstrandError,
    ProducerError,
    Status,
)
from ..kafka_errors import KafkaError
from ..transactions import producer_key
from ..types import lsn_epoch
from ._codec import KafkaDecodeError
from ._inflate import TooLarge, UnsupportedCodec
from ._records import RECORDS_ROOM_MAX, KafkaBatch, decode_batches

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ..net import Budget
    from ._offsets import OffsetMap
    from ._protocol import Request


class Produce:
    """Produce, the part of ``DataPlane`` (which has the fields)."""

    client: AsyncClient
    #: Transactional producers are served (``--kafka-transactions``).
    transactions: bool

    async def may(self, request: Request, op: str, name: str, index: int) -> bool:
        raise NotImplementedError

    async def partition(self, name: str, index: int) -> tuple[NamedLogs | None, int]:
        raise NotImplementedError

    async def offsets(self, log_id: int, epoch: int, wait_s: float = 0.0) -> OffsetMap | None:
        raise NotImplementedError

    async def produce(self, request: Request) -> dict[str, Any] | None:
        body = request.body
        timeout_s = max(body["timeout_ms"], 1) / 1000
        out = []
        async with trio.open_nursery() as nursery:
            for t in body["topic_data"]:
                rows: list[dict[str, Any]] = []
                out.append({"name": t["name"], "partition_responses": rows})
                for p in t["partition_data"]:
                    row: dict[str, Any] = {"index": p["index"], "error_code": 0, "base_offset": -1}
                    rows.append(row)
                    if body["transactional_id"] is not None and not self.transactions:
                        row["error_code"] = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                        row["error_message"] = "transactions are not supported yet"
                        continue
                    if not await self.may(request, "append", t["name"], p["index"]):
                        row["error_code"] = KafkaError.TOPIC_AUTHORIZATION_FAILED
                        continue
                    decoded = getattr(request.conn, "decoded", None)
                    nursery.start_soon(self._produce_one, t["name"], p, row, timeout_s, decoded)
        if body["acks"] == 0:
            return None
        return {"responses": out, "throttle_time_ms": 0}

    async def _produce_one(
        self,
        name: str,
        p: dict[str, Any],
        row: dict[str, Any],
        timeout_s: float,
        decoded: Budget | None,
    ) -> None:
        r, log_id = await self.partition(name, p["index"])
        if r is None:
            row["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            return
        try:
            batches, held = await self._records(p["records"] or b"", decoded, timeout_s)
        except KafkaDecodeError as exc:
            row.update(error_code=_produce_error(exc), error_message=str(exc))
            return
        try:
            await self._store(log_id, batches, row, timeout_s)
        finally:
            if decoded is not None:
                decoded.give(held)

    async def _records(
        self, data: bytes, decoded: Budget | None, timeout_s: float
    ) -> tuple[list[KafkaBatch], int]:
        """A partition's batches decoded, and what of ``decoded`` (the front's
        budget for decoded requests) they hold: as much as it has room for
        (all it may when nothing else holds any); with more, they wait for
        room and are decoded again (``_records`` says what a batch costs)."""
        if decoded is None:
            return decode_batches(data), 0
        with trio.move_on_after(max(timeout_s, 1.0)):
            while True:
                room = decoded.limit - decoded.used
                allowed = RECORDS_ROOM_MAX if decoded.used == 0 else min(RECORDS_ROOM_MAX, room)
                try:
                    batches = decode_batches(data, max(allowed, 0))
                except TooLarge:
                    if allowed >= RECORDS_ROOM_MAX:
                        raise
                    await decoded.wait_freed()
                    continue
                held = sum(b.cost for b in batches)
                decoded.take(held)
                return batches, held
        raise TooLarge("no room to decode these records in time")

    async def _store(
        self, log_id: int, batches: list[KafkaBatch], row: dict[str, Any], timeout_s: float
    ) -> None:
        try:
            problem = _refused(batches, self.transactions)
            if problem is not None:
                row.update(error_code=KafkaError.INVALID_RECORD, error_message=problem)
                return
            if not any(b.values for b in batches):
                return
            first = await self._append(log_id, batches)
        except (KafkaDecodeError, LogstrandError) as exc:
            row.update(error_code=_produce_error(exc), error_message=str(exc))
            return
        m = await self.offsets(log_id, lsn_epoch(first), wait_s=timeout_s)
        if m is None:
            row.update(
                error_code=KafkaError.REQUEST_TIMED_OUT,
                error_message="stored, but the log's earlier epochs are still being recovered",
            )
            return
        row["base_offset"] = m.offset(first)

    async def _append(self, log_id: int, batches: list[KafkaBatch]) -> int:
        """Append a partition's batches; the first LSN.  A batch of an
        idempotent producer goes alone, numbered (producer id, base
        sequence): the log stores it once however often it comes, and
        answers a retry with the LSN it got (``client.append_numbered``)."""
        if all(b.producer_id < 0 for b in batches):
            values = [v for b in batches for v in b.values]
            lsns = await self.client.append_batch(
                log_id,
                values,
                keys=[k for b in batches for k in b.keys],
                extras=[x for b in batches for x in b.extras],
            )
            return lsns[0]
        first = None
        for b in batches:
            payloads, keys, extras = b.values, b.keys, b.extras
            if b.producer_id < 0:
                lsns = await self.client.append_batch(log_id, payloads, keys=keys, extras=extras)
                lsn = lsns[0]
            else:
                # Numbered under the producer's id and epoch (``producer_key``).
                number = (producer_key(b.producer_id, b.producer_epoch), b.base_sequence)
                lsn = await self.client.append_numbered(
                    log_id,
                    payloads,
                    keys=keys,
                    extras=extras,
                    producer=number,
                    transactional=b.transactional,
                )
            first = lsn if first is None else first
        assert first is not None
        return first


def _produce_error(exc: Exception) -> KafkaError:
    """What Kafka calls a partition's failure to produce (the first that fits)."""
    if isinstance(exc, UnsupportedCodec):
        return KafkaError.UNSUPPORTED_COMPRESSION_TYPE
    if isinstance(exc, TooLarge):
        return KafkaError.MESSAGE_TOO_LARGE
    if isinstance(exc, KafkaDecodeError):
        return KafkaError.CORRUPT_MESSAGE
    if isinstance(exc, ProducerError):
        if exc.status == Status.UNKNOWN_PRODUCER:
            return KafkaError.UNKNOWN_PRODUCER_ID
        if exc.status == Status.FENCED:
            return KafkaError.INVALID_PRODUCER_EPOCH
        return KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    if isinstance(exc, DuplicateAppendError):
        return KafkaError.DUPLICATE_SEQUENCE_NUMBER
    if isinstance(exc, InvalidArgumentError):
        return KafkaError.INVALID_RECORD
    return KafkaError.REQUEST_TIMED_OUT


def _refused(batches: list[Any], transactions: bool) -> str | None:
    for b in batches:
        if b.control:  # markers are the coordinator's to write, not a producer's
            return "a producer may not write control batches"
        if b.transactional and not transactions:
            return "transactional batches are not served (--kafka-transactions)"
    return None

"""ListOffsets (which record a timestamp names, and its time) and
OffsetForLeaderEpoch (where an epoch ends, ``_offsets.epoch_end``).

Kafka answers a search for time *t* with the first record at or after *t*,
giving its offset and its own timestamp, and with offset -1 and timestamp
-1 when no record is that recent; MAX_TIMESTAMP (-3, KIP-734) names the
record with the largest timestamp.  Here the search goes by the log's own
time (``client.find_time``), which the nodes index, and the answer gives
the record found with the time a consumer sees for it: the CreateTime its
producer gave, else the log's.  A producer's CreateTime is not indexed: a
record whose CreateTime is far from when it was appended is found by its
append time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import LogstrandError, NotFoundError
from ..types import Record, lsn_epoch
from ._errors import KafkaError
from ._offsets import epoch_end

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ._offsets import OffsetMap
    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")

#: What a search for a time past every record answers (Kafka's UNKNOWN_OFFSET).
NOT_FOUND = (-1, -1)
#: Read batches looked at for the first record from an LSN (gaps before it).
BATCHES_MAX = 16


async def first_record(
    client: AsyncClient, log_id: int, lsn: int, tail: int
) -> tuple[int, int] | None:
    """(LSN, timestamp a consumer sees) of the first record from ``lsn`` up
    to ``tail``; None when there is none."""
    if lsn > tail:
        return None
    async with client.read(log_id, lsn, tail) as reader:
        for _ in range(BATCHES_MAX):
            items = await reader.next_objects()
            if not items:
                return None
            for item in items:
                if isinstance(item, Record):
                    created = item.create_time
                    return item.lsn, item.timestamp if created is None else created
    return None


async def at_time(
    client: AsyncClient,
    log_id: int,
    timestamp_ms: int,
    tail: int,
    offsets_of: Callable[[int], Awaitable[OffsetMap]],
) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after ``timestamp_ms``
    by the log's time, or ``NOT_FOUND``.  ``offsets_of(epoch)``: the log's
    offset map with that epoch known."""
    lsn = await client.find_time(log_id, timestamp_ms)
    found = await first_record(client, log_id, lsn, tail)
    if found is None:
        return NOT_FOUND
    m = await offsets_of(lsn_epoch(found[0]))
    return m.offset(found[0]), found[1]


async def newest(
    client: AsyncClient, log_id: int, bounds: tuple[int, int], tail: int, m: OffsetMap
) -> tuple[int, int]:
    """MAX_TIMESTAMP: (offset, timestamp) of the newest record by the log's
    time (the last one: offset ``end - 1`` of ``bounds``, start and end), or
    ``NOT_FOUND`` for a partition with no record."""
    start, end = bounds
    if end <= start:
        return NOT_FOUND
    found = await first_record(client, log_id, m.lsn_at(end - 1), tail)
    if found is None:
        return NOT_FOUND
    return m.offset(found[0]), found[1]


class OffsetListing:
    """ListOffsets, the part of ``DataPlane`` (which has the fields)."""

    client: AsyncClient

    async def may(self, request: Request, op: str, name: str, index: int) -> bool:
        raise NotImplementedError

    async def partition(self, name: str, index: int) -> tuple[NamedLogs | None, int]:
        raise NotImplementedError

    async def _bounds(self, log_id: int) -> tuple[int, int, OffsetMap, int]:
        raise NotImplementedError

    async def offsets(self, log_id: int, epoch: int, wait_s: float = 0.0) -> OffsetMap | None:
        raise NotImplementedError

    async def list_offsets(self, request: Request) -> dict[str, Any]:
        out = []
        for t in request.body["topics"]:
            rows: list[dict[str, Any]] = []
            for p in t["partitions"]:
                if not await self.may(request, "read", t["name"], p["partition_index"]):
                    refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
                    rows.append({"partition_index": p["partition_index"], "error_code": refused})
                    continue
                rows.append(await self._list_one(t["name"], p, request.version))
            out.append({"name": t["name"], "partitions": rows})
        return {"throttle_time_ms": 0, "topics": out}

    async def offset_for_leader_epoch(self, request: Request) -> dict[str, Any]:
        """Where each asked epoch ends.  A consumer asks after a leader change
        or a seek with an epoch, to learn whether records it read were lost
        (Kafka's truncation detection, KIP-320).  ``current_leader_epoch`` is
        not checked: every front serves every partition, none is fenced."""
        out = []
        for t in request.body["topics"]:
            rows: list[dict[str, Any]] = []
            for p in t["partitions"]:
                row = {"partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
                if not await self.may(request, "read", t["topic"], p["partition"]):
                    rows.append({**row, "error_code": KafkaError.TOPIC_AUTHORIZATION_FAILED})
                    continue
                code, epoch, end = await self._epoch_end(t["topic"], p)
                rows.append({**row, "error_code": code, "leader_epoch": epoch, "end_offset": end})
            out.append({"topic": t["topic"], "partitions": rows})
        return {"throttle_time_ms": 0, "topics": out}

    async def _epoch_end(self, name: str, p: dict[str, Any]) -> tuple[int, int, int]:
        r, log_id = await self.partition(name, p["partition"])
        if r is None:
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        try:
            _, end, m, tail = await self._bounds(log_id)
            # The map must hold every epoch up to the tail's: an epoch's end
            # is the next one's base.
            m = await self.offsets(log_id, lsn_epoch(tail), wait_s=5.0) or m
        except NotFoundError:
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        except LogstrandError as exc:
            _log.warning("kafka: OffsetForLeaderEpoch %s[%d]: %s", name, p["partition"], exc)
            return KafkaError.REQUEST_TIMED_OUT, -1, -1
        epoch, offset = epoch_end(m, p["leader_epoch"], end)
        return KafkaError.NONE, epoch, offset

    async def _list_one(self, name: str, p: dict[str, Any], version: int) -> dict[str, Any]:
        row: dict[str, Any] = {"partition_index": p["partition_index"], "error_code": 0}
        r, log_id = await self.partition(name, p["partition_index"])
        if r is None:
            row["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            return row
        try:
            start, end, m, tail = await self._bounds(log_id)
            ts, stamp = p["timestamp"], -1
            if ts == -2:  # earliest
                offset = start
            elif ts == -3:  # the record with the largest timestamp (KIP-734)
                offset, stamp = await newest(self.client, log_id, (start, end), tail, m)
            elif ts < 0:  # latest
                offset = end
            else:

                async def offsets_of(epoch: int) -> OffsetMap:
                    return await self.offsets(log_id, epoch, wait_s=5.0) or m

                offset, stamp = await at_time(self.client, log_id, ts, tail, offsets_of)
                if (offset, stamp) != NOT_FOUND:
                    offset = max(start, offset)
        except NotFoundError:
            row["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            return row
        except LogstrandError as exc:
            _log.warning("kafka: ListOffsets %s[%d]: %s", name, p["partition_index"], exc)
            row["error_code"] = KafkaError.REQUEST_TIMED_OUT
            return row
        row.update(timestamp=stamp, offset=offset)
        if version == 0:  # a list, empty when no record is that recent
            row["old_style_offsets"] = [offset] if offset >= 0 else []
        return row

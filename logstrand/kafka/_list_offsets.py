"""ListOffsets (which record a timestamp names, and its time) and
OffsetForLeaderEpoch (where an epoch ends, ``_offsets.epoch_end``).

Kafka answers a search for time *t* with the first record, in offset order,
whose timestamp is at or after *t*, giving its offset and its timestamp, and
offset -1 and timestamp -1 when no record has such a time; MAX_TIMESTAMP
(-3, KIP-734) names the record with the largest timestamp.  A topic's
timestamps are CreateTimes (Kafka's default): the time each producer gave
its record, else (a record appended natively without one) the log's own.
The nodes index the log's time, not producers' (``client.find_time``), so
the search goes by offsets instead: a binary search that reads the record
at each probe (about 30 reads for a billion records), which is exact when
CreateTimes rise with offsets, as they do from producers with clocks in
step and from a replay of old records in their order; then the
``DISORDER_RECORDS`` records before where it landed are read again for an
earlier one with the time (CreateTimes a little out of order: clocks a
little apart, retried batches).  MAX_TIMESTAMP looks at the last
``DISORDER_RECORDS`` records.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import LogstrandError, NotFoundError
from ..kafka_errors import KafkaError
from ..types import Record, lsn_epoch
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
#: Records read again before a search's landing point, and at the end for
#: MAX_TIMESTAMP: how far out of order CreateTimes may be and still be found.
DISORDER_RECORDS = 1000


async def _scan(
    client: AsyncClient, log_id: int, lsn: int, tail: int, count: int
) -> list[tuple[int, int]]:
    """(LSN, timestamp a consumer sees) of up to ``count`` records from ``lsn``."""
    out: list[tuple[int, int]] = []
    if lsn > tail:
        return out
    async with client.read(log_id, lsn, tail) as reader:
        while len(out) < count:
            items = await reader.next_objects()
            if not items:
                break
            for item in items:
                if isinstance(item, Record):
                    created = item.create_time
                    out.append((item.lsn, item.timestamp if created is None else created))
    return out[:count]


class Searcher:
    """One partition's records by offset, for the searches by time."""

    def __init__(
        self,
        client: AsyncClient,
        log_id: int,
        tail: int,
        m: OffsetMap,
        offsets_of: Callable[[int], Awaitable[OffsetMap]],
    ) -> None:
        self.client, self.log_id, self.tail, self.m = client, log_id, tail, m
        self._offsets_of = offsets_of

    async def _offset(self, lsn: int) -> int:
        epoch = lsn_epoch(lsn)
        if not self.m.known(epoch):
            self.m = await self._offsets_of(epoch)
        return self.m.offset(lsn)

    async def record_at(self, offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``offset``."""
        found = await self.records(offset, 1)
        return found[0] if found else None

    async def records(self, offset: int, count: int) -> list[tuple[int, int]]:
        """(offset, timestamp) of up to ``count`` records from ``offset``."""
        got = await _scan(self.client, self.log_id, self.m.lsn_at(offset), self.tail, count)
        return [(await self._offset(lsn), ts) for lsn, ts in got]

    async def at_time(self, t: int, start: int, end: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record whose timestamp is at or
        after ``t``, between offsets ``start`` and ``end``; or ``NOT_FOUND``
        (see the module docstring)."""
        lo, hi = start, end
        while lo < hi:
            mid = (lo + hi) // 2
            found = await self.record_at(mid)
            if found is None or found[1] >= t:
                hi = mid
            else:
                lo = found[0] + 1
        # The first with the time is at ``lo`` (or there is none, at the
        # end), unless an earlier one is out of order: read those again.
        back = max(start, lo - DISORDER_RECORDS)
        for offset, ts in await self.records(back, lo - back + 1):
            if ts >= t:
                return offset, ts
        return NOT_FOUND

    async def newest(self, start: int, end: int) -> tuple[int, int]:
        """MAX_TIMESTAMP: (offset, timestamp) of the record with the largest
        timestamp among the last ``DISORDER_RECORDS`` (the first of them on a
        tie, as Kafka keeps it), or ``NOT_FOUND`` with no record."""
        back = max(start, end - DISORDER_RECORDS)
        best = NOT_FOUND
        for offset, ts in await self.records(back, end - back) if end > start else []:
            if ts > best[1]:
                best = (offset, ts)
        return best


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

            async def offsets_of(epoch: int) -> OffsetMap:
                return await self.offsets(log_id, epoch, wait_s=5.0) or m

            search = Searcher(self.client, log_id, tail, m, offsets_of)
            if ts == -2:  # earliest
                offset = start
            elif ts == -3:  # the record with the largest timestamp (KIP-734)
                offset, stamp = await search.newest(start, end)
            elif ts < 0:  # latest
                offset = end
            else:
                offset, stamp = await search.at_time(ts, start, end)
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

"""The front's data plane: Produce, Fetch, ListOffsets.

Produce appends each partition's records with one ``append_batch`` (the
partitions of a request in parallel) and answers with the Kafka offset of
the first (``_offsets``).  acks=1 and acks=all are the same here: an append
is acknowledged once R copies are stored, which is what acks=all asks.
acks=0 gets no answer, as in Kafka.

Every record keeps its headers and the CreateTime its producer gave it, as
the record's extras (``batch.pack_extra``), which native readers see too.

Fetch reads from the LSN that a fetch offset maps to, up to the log's tail,
and returns the records as uncompressed RecordBatch v2 batches (CreateTime),
each record with its producer's create time, or the log's own time (the
sequencer's timestamp, the one retention and ``find_time`` use) for a record
appended natively without one.  Gaps are stepped over (DATALOSS is logged and
counted).  With nothing to return it polls the tail until ``max_wait_ms``.

Transactional producers (``--kafka-transactions``): their batches are stored
flagged TRANSACTIONAL; a read_committed Fetch stops at the last stable offset
and lists the aborted transactions the consumer filters by (``_txn_reads``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from ..client import GapItem
from ..errors import (
    DuplicateAppendError,
    InvalidArgumentError,
    LogstrandError,
    ProducerError,
    Status,
)
from ..kafka_errors import KafkaError
from ..transactions import producer_key
from ..types import GapType, lsn_epoch
from ._codec import KafkaDecodeError
from ._fetch_read import FetchReads
from ._inflate import CODEC_IDS, TooLarge, UnsupportedCodec
from ._list_offsets import OffsetListing
from ._offsets import OffsetMap
from ._records import RECORDS_ROOM_MAX, KafkaBatch, decode_batches
from ._rereads import Rereads
from ._sessions import Session, Sessions, close
from ._txn_reads import TxnReads

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ..net import Budget
    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")

#: Bytes one Fetch answer carries at most, whatever the client allows (its
#: answer waits in memory until the client reads it).
FETCH_BYTES_MAX = 16 * 1024 * 1024
#: Offset maps kept (one per log read or written lately).
MAPS_MAX = 100_000
#: A fetch below the high watermark uses bounds at most this old.
BOUNDS_S = 1.0


class DataPlane(OffsetListing, FetchReads):
    def __init__(self, client: AsyncClient, topics: Any, auth: Any = None) -> None:
        #: Grants in secure mode (``_auth.FrontAuth``; None: everything allowed).
        self.auth = auth
        self.client = client
        self.topics = topics
        self._maps: dict[int, OffsetMap] = {}
        self.rereads = Rereads(client.view)
        #: Each log's bounds as a fetch last asked for them, and when.
        self._known: dict[int, tuple[float, tuple[int, int, OffsetMap, int]]] = {}
        #: Read streams kept from one fetch to the next.
        self.sessions = Sessions()
        self.dataloss = 0
        #: Transactional producers are served (``--kafka-transactions``).
        self.transactions = False
        self.txn_reads = TxnReads(client)

    # -- offsets ------------------------------------------------------------------

    async def offsets(self, log_id: int, epoch: int, wait_s: float = 0.0) -> OffsetMap | None:
        """The log's offset map, with ``epoch`` known (waiting up to ``wait_s``
        for the epochs before it to be recovered); None if it is not."""
        m = self._maps.get(log_id)
        deadline = time.monotonic() + wait_s
        pause = 0.005
        while m is None or not m.known(epoch):
            astore = self.client.view.astore
            bases, clean = await astore.run(
                lambda s: (s.offset_bases(log_id), s.last_clean_epoch(log_id))
            )
            m = OffsetMap(tuple(bases), clean)
            if len(self._maps) >= MAPS_MAX:
                self._maps.clear()
            self._maps[log_id] = m
            if m.known(epoch):
                break
            if time.monotonic() + pause > deadline:
                return None
            await trio.sleep(pause)
            pause = min(pause * 2, 0.2)
        return m

    async def partition(self, name: str, index: int) -> tuple[NamedLogs | None, int]:
        """The range of topic ``name`` and the log of its partition ``index``.
        A topic this front does not know is looked up again (``Rereads``):
        another front or the CLI may have made it since this one's view last
        read the configuration."""
        r = self.topics().get(name)
        if r is None:
            await self.rereads.reread()
            r = self.topics().get(name)
        log_id = None if r is None else r.log(index)
        if r is None or log_id is None:
            return None, 0
        return r, log_id

    async def may(self, request: Request, op: str, name: str, index: int) -> bool:
        """Whether the request's user may ``op`` on the partition (secure
        mode; a partition of no topic is let through, to be answered as one)."""
        if self.auth is None or not self.auth.secure:
            return True
        r, log_id = await self.partition(name, index)
        return r is None or bool(await self.auth.may(request, op, log_id))

    # -- Produce ------------------------------------------------------------------

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

    # -- ListOffsets ----------------------------------------------------------------

    async def bounds(self, log_id: int) -> tuple[int, int, OffsetMap]:
        """The log's start offset, high watermark and offset map."""
        start, end, m, _ = await self._bounds(log_id)
        return start, end, m

    async def _fetch_bounds(self, log_id: int, offset: int) -> tuple[int, int, OffsetMap, int]:
        """``_bounds`` for a fetch at ``offset``: asked of the nodes only when
        the last answer is older than ``BOUNDS_S`` or the fetch is at its end
        (a consumer catching up asks once a second, not once a fetch), and
        not at all while a stream that follows the log from there has
        nothing new (a consumer waiting at the end costs no questions)."""
        known = self._known.get(log_id)
        now = trio.current_time()
        if known is not None and now < known[0] + BOUNDS_S and offset < known[1][1]:
            return known[1]
        if known is not None and offset == known[1][1] and self.sessions.waiting(log_id, offset):
            return known[1]
        fresh = await self._bounds(log_id)
        if len(self._known) >= MAPS_MAX:
            self._known.clear()
        self._known[log_id] = (now, fresh)
        return fresh

    async def _bounds(self, log_id: int) -> tuple[int, int, OffsetMap, int]:
        """``bounds`` and the tail LSN they came from."""
        tail = await self.client.tail_lsn(log_id)
        trim = await self.client.trim_point(log_id)
        m = await self.offsets(log_id, max(lsn_epoch(tail), lsn_epoch(trim)), wait_s=5.0)
        if m is None:
            raise LogstrandError(f"log {log_id}: earlier epochs are still being recovered")
        start = m.offset(trim) + 1 if trim > 0 else 0
        return start, max(start, m.next_offset(tail)), m, tail

    # -- Fetch ----------------------------------------------------------------------

    async def fetch(self, request: Request) -> dict[str, Any]:
        body = request.body
        deadline = trio.current_time() + max(0, body["max_wait_ms"]) / 1000
        budget = [min(FETCH_BYTES_MAX, max(1, body["max_bytes"]))]
        asked = [(t["topic"], p) for t in body["topics"] for p in t["partitions"]]
        denied = [
            (name, _denied(p["partition"]))
            for name, p in asked
            if not await self.may(request, "read", name, p["partition"])
        ]
        if denied:
            refused = {(n, r["partition_index"]) for n, r in denied}
            asked = [(n, p) for n, p in asked if (n, p["partition"]) not in refused]
        results: list[tuple[str, dict[str, Any]]] = []
        # read_committed: up to each log's last stable offset (``_txn_reads``).
        committed = self.transactions and body.get("isolation_level", 0) == 1
        while asked:
            results = [await self._fetch_one(name, p, budget, committed) for name, p in asked]
            got = sum(len(res.get("records") or b"") for _, res in results)
            if got >= max(1, body["min_bytes"]) or trio.current_time() >= deadline:
                break
            if any(res["error_code"] for _, res in results):
                break
            if not await self._wait_for_records(asked, results, deadline, committed):
                break
            budget = [min(FETCH_BYTES_MAX, max(1, body["max_bytes"]))]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, res in results + denied:
            by_topic.setdefault(name, []).append(res)
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": n, "partitions": rows} for n, rows in by_topic.items()],
        }

    async def _wait_for_records(
        self, asked: list[tuple[str, Any]], results: list[Any], deadline: float, committed: bool
    ) -> bool:
        """A long poll: wait until a partition at its end gets a record, or
        the deadline.  Each waits on a read stream that follows its log (the
        nodes push what is released; nothing is asked of them meanwhile),
        and the stream that gets records is kept for the fetch that reads
        them (``_sessions``).  True if records came."""
        waits, stable = [], []
        for (name, p), (_, row) in zip(asked, results, strict=True):
            r, log_id = await self.partition(name, p["partition"])
            if r is not None and p["fetch_offset"] == row["high_watermark"]:
                waits.append((log_id, p["fetch_offset"]))
            elif r is not None and committed and p["fetch_offset"] == row["last_stable_offset"]:
                stable.append(log_id)  # an open transaction: wait for its end
        if not waits and not stable:
            return False
        came = False
        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = deadline

            async def wait(log_id: int, offset: int) -> None:
                nonlocal came
                if await self._follow(log_id, offset):
                    came = True
                    nursery.cancel_scope.cancel()

            async def settle(log_id: int) -> None:
                nonlocal came
                await self.txn_reads.changed(log_id)
                self._known.pop(log_id, None)  # the log moved: its bounds too
                came = True
                nursery.cancel_scope.cancel()

            for log_id, offset in waits:
                nursery.start_soon(wait, log_id, offset)
            for log_id in stable:
                nursery.start_soon(settle, log_id)
        return came

    async def _follow(self, log_id: int, offset: int) -> bool:
        """Wait for the first items past ``offset`` on a stream that follows
        the log; keep them and the stream for the next fetch."""
        m = await self.offsets(log_id, 0)
        assert m is not None
        session = self.sessions.take(log_id, offset)
        if session is None:
            stream = self.client.read(log_id, m.lsn_at(offset), None)
            session = Session(stream, stream.batches(), follows=True)
            session.follow(self.client.nursery)
        elif not session.follows or session.leftover:
            await self.sessions.keep(log_id, offset, session)
            return True  # it holds what this fetch is waiting for
        try:
            while True:
                items = await session.next_items()
                if items is None:
                    await close(session)
                    return False
                if any(not isinstance(item, GapItem) for item in items):
                    break
                # Gaps only (a bridge at a new epoch): nothing to fetch yet.
                for gap in items:
                    if gap.type == GapType.DATALOSS:
                        self.dataloss += 1
                        _log.warning("kafka: log %d: records lost (%s), skipped", log_id, gap)
        except trio.Cancelled:
            # The long poll ended: the session waits, whole, for the next one.
            with trio.CancelScope(shield=True):
                await self.sessions.keep(log_id, offset, session)
            raise
        except BaseException:
            await close(session)
            raise
        session.leftover = items
        self._known.pop(log_id, None)  # the high watermark moved
        await self.sessions.keep(log_id, offset, session)
        return True

    async def _fetch_one(
        self, name: str, p: dict[str, Any], budget: list[int], committed: bool = False
    ) -> tuple[str, dict[str, Any]]:
        row: dict[str, Any] = {
            "partition_index": p["partition"],
            "error_code": 0,
            "high_watermark": -1,
            # Empty, not null: librdkafka takes a null record set as malformed.
            "records": b"",
        }
        r, log_id = await self.partition(name, p["partition"])
        if r is None:
            row["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            return name, row
        try:
            start, end, m, tail = await self._fetch_bounds(log_id, p["fetch_offset"])
        except LogstrandError as exc:
            _log.warning("kafka: Fetch %s[%d]: %s", name, p["partition"], exc)
            row["error_code"] = KafkaError.REQUEST_TIMED_OUT
            return name, row
        row.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
        offset = p["fetch_offset"]
        if not start <= offset <= end:
            row["error_code"] = KafkaError.OFFSET_OUT_OF_RANGE
            return name, row
        stop, key = end, None
        if committed and offset < end:
            c = await self.txn_reads.committed(log_id, m, offset, end, tail)
            if c.last_stable_offset <= offset and self._known.pop(log_id, None):
                # Held at the LSO: told the log's end as it is now, not as
                # kept a while for consumers that catch up.
                start, end, m, tail = await self._fetch_bounds(log_id, offset)
                row.update(high_watermark=end, log_start_offset=start)
                c = await self.txn_reads.committed(log_id, m, offset, end, tail)
            row.update(last_stable_offset=c.last_stable_offset, aborted_transactions=c.aborted)
            # Its own sessions, read to the LSO (not a read_uncommitted one's).
            stop, tail, key = c.last_stable_offset, c.until_lsn, -log_id
        if offset < stop and budget[0] > 0:
            limit = min(budget[0], max(1, p["partition_max_bytes"]))
            codec = CODEC_IDS[r.attributes.kafka_codec]
            data = await self._read(log_id, m, offset, limit, tail, codec, key)
            budget[0] -= len(data)
            row["records"] = data
        return name, row


def _denied(index: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": KafkaError.TOPIC_AUTHORIZATION_FAILED,
        "high_watermark": -1,
        "records": b"",
    }


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

"""The front's data plane: what Produce (``_produce``), Fetch and
ListOffsets (``_list_offsets``) share (the offset maps, a partition's log,
the grants), and Fetch.

Fetch reads from the LSN that a fetch offset maps to, up to the log's tail,
and returns the records as uncompressed RecordBatch v2 batches (CreateTime),
each record with its producer's create time, or the log's own time (the
sequencer's timestamp, the one retention and ``find_time`` use) for a record
appended natively without one.  Gaps are stepped over (DATALOSS is logged and
counted).  With nothing to return it polls the tail until ``max_wait_ms``.

Transactional producers (``--kafka-transactions``): their batches are stored
flagged TRANSACTIONAL (``_produce``); a read_committed Fetch stops at the last stable offset
and lists the aborted transactions the consumer filters by (``_txn_reads``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from ..client import GapItem
from ..errors import (
    LogstrandError,
)
from ..kafka_errors import KafkaError
from ..types import GapType, lsn_epoch
from ._fetch_read import FetchReads
from ._inflate import CODEC_IDS
from ._list_offsets import OffsetListing
from ._offsets import OffsetMap
from ._produce import Produce
from ._rereads import Rereads
from ._sessions import Session, Sessions, close
from ._txn_reads import TxnReads

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ._protocol import Request

_log = logging.getLogger("logstrand.kafka")

#: Bytes one Fetch answer carries at most, whatever the client allows (its
#: answer waits in memory until the client reads it).
FETCH_BYTES_MAX = 16 * 1024 * 1024
#: Offset maps kept (one per log read or written lately).
MAPS_MAX = 100_000
#: A fetch below the high watermark uses bounds at most this old.
BOUNDS_S = 1.0


class DataPlane(Produce, OffsetListing, FetchReads):
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

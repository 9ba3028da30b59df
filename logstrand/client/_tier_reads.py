"""A reader's records below its log's tiered point (docs/tiered-storage.md).

They are in the object store, one copy each: the reader asks one node for
them (``TierRead``), the log's owner first (rendezvous over the storage
nodes, which keeps each object in one node's cache), any other node when
that one cannot answer.  An answer holds stored batches with their
windows and the gaps the object holds, as a read stream's does, and where
the next read starts; once that is past the tiered point the reader reads
the nodes' streams from there (``_reader.ReadStream``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from ..errors import LogstrandError, Status
from ..placement import rendezvous_rank
from ..types import GapType
from ..types import SegmentField as F
from ..wire import TIER_PROTOCOL, TierRead, TierReadReply
from ._reader_parts import GapItem, Item
from ._views import BatchView, RecordRun

if TYPE_CHECKING:
    from ..epochstore import LogAttributes
    from ..rpc import ClusterView, Links

_log = logging.getLogger("logstrand.client")

#: Bytes of records one ``TierRead`` asks for.
TIER_READ_BYTES = 4 * 1024 * 1024
#: Gaps of an object that is lost or damaged: the nodes' copies may do.
_UNREADABLE = (GapType.DATALOSS, GapType.CHECKSUM_FAIL)
#: How long a node may take to read an object for an answer.
TIER_READ_TIMEOUT_S = 30.0


class TierAdmin(Protocol):
    """What tiered reads need of the client's ``Admin`` (which uses them:
    a protocol, not an import, so the two modules form no cycle)."""

    @property
    def view(self) -> ClusterView: ...

    async def log_attributes(self, log_id: int) -> LogAttributes: ...


class TierReads:
    """The part of one reader's log that is tiered (see the module docstring)."""

    def __init__(self, admin: TierAdmin, links: Links, log_id: int) -> None:
        self.admin = admin
        self.links = links
        self.log_id = log_id
        #: The log's tiered point, as the epoch store or the last answer said.
        self.point: int | None = None

    async def step(self, start: int, until: int) -> tuple[list[Item], int] | None:
        """Items from ``start`` and the LSN the next step starts at; None
        when ``start`` is past the tiered point (or ``until``): the nodes'
        streams have it."""
        log = self.log_id
        if self.point is None:
            # Only a tiered log's reader reads its tiered point (one more
            # read of the epoch store); any other's reads as ever.
            if (await self.admin.log_attributes(log)).tier_after_ms is None:
                return None
            points = await self.admin.view.astore.run(lambda s: s.tier_points([log]))
            self.point = points[log]
        if start > min(self.point, until):
            return None
        msg_until = min(self.point, until)
        view = self.admin.view
        nodes = rendezvous_rank(log, view.storage_weights())
        why = "no node is up"
        for node in nodes:
            link = await self.links.connected(node)
            if link is None or link.conn.protocol < TIER_PROTOCOL:
                why = f"node {node} cannot be reached or reads no tiered records"
                continue
            rid = self.links.next_request_id()
            msg = TierRead(rid, log, start, msg_until, TIER_READ_BYTES)
            reply = await link.request(msg, rid, TIER_READ_TIMEOUT_S)
            self.links.check_access(reply)  # no grant: AccessDeniedError, as a read
            if not isinstance(reply, TierReadReply):
                why = f"node {node} did not answer in time"
                continue
            if reply.status != Status.OK:
                why = f"node {node}: {reply.message or Status(reply.status).name}"
                if reply.status in (Status.AGAIN, Status.UNAVAILABLE, Status.OVERLOADED):
                    continue
                raise LogstrandError(f"log {log}: tiered records: {why}", Status(reply.status))
            self.point = reply.tier_point
            if reply.next_lsn <= start:
                raise LogstrandError(
                    f"log {log}: node {node} answered no progress from LSN {start}",
                    Status.FAILED,
                )
            return items_of(reply), reply.next_lsn
        raise LogstrandError(f"log {log}: its tiered records cannot be read: {why}", Status.AGAIN)

    async def first(self, start: int, until: int) -> tuple[list[Item], int, bool] | None:
        """A reader's read below the tiered point, before the nodes' streams
        open: ``step``'s items up to the gap of a lost or damaged object (if
        one comes), the LSN the next read starts at, and whether that read
        is here again; None: past the tiered point.

        The nodes may still hold what an object lost (their local retention
        has not dropped it yet): their streams read it from the gap on.
        Below their floors they send the reader back here
        (``ReaderCore.take_tiered``, ``span``), and the gap is delivered
        then: never a silent skip, and no loss said where a copy is kept."""
        step = await self.step(start, until)
        if step is None:
            return None
        items, nxt = step
        before, loss = before_loss(items)
        if loss is not None:
            return before, loss.lo, False
        return items, nxt, nxt <= until

    async def span(self, lo: int, hi: int) -> tuple[list[Item], tuple[int, int] | None]:
        """One read of LSNs the nodes' streams left to the object store
        (their local floors), and what is left of them (None: nothing).  One
        ``TierRead`` of up to 4 MiB a call: a reader's turn stays short, and
        a span of gigabytes is never held at once."""
        if self.point is None or self.point < hi:
            self.point = None  # read the tiered point again: it moved
        step = await self.step(lo, hi)
        if step is None:
            # The nodes' floors are past the tiered point the epoch store
            # shows: never a silent skip, whatever the cause.
            _log.error("log %d: nodes keep no copies up to %#x, not tiered", self.log_id, hi)
            return [GapItem(GapType.DATALOSS, lo, hi)], None
        items, nxt = step
        return items, (None if nxt > hi else (nxt, hi))

    async def find_time(self, ts_ms: int) -> int | None:
        """The first LSN at or below the tiered point stamped at or after
        ``ts_ms`` (None: none is, or the log is not tiered).  The nodes
        answer ``find_time`` from what they hold, above their local floors;
        this is the part below.  Timestamps never go back in a log, so each
        segment's newest (recorded with it) rises with the segments: the
        first segment whose newest is late enough holds the answer, and only
        it is read.  A segment recorded before its newest was kept is read
        too, then the next, until the answer is found."""
        log = self.log_id
        if (await self.admin.log_attributes(log)).tier_after_ms is None:
            return None
        trim, (point, segments) = await self.admin.view.astore.run(
            lambda s: (s.trim_point(log), s.tier_state(log))
        )
        segments = [seg for seg in segments if seg[F.LAST] > trim]
        newest = [seg[F.LAST_TS] if len(seg) > F.LAST_TS else None for seg in segments]
        if not segments or (newest[-1] is not None and newest[-1] < ts_ms):
            return None  # every tiered record is older: the nodes' answer stands
        at = next(i for i, ts in enumerate(newest) if ts is None or ts >= ts_ms)
        self.point = point
        start = max(segments[at][F.FIRST], trim + 1)
        for _ in range(1 << 20):  # bounded: each step moves ``start`` on
            step = await self.step(start, point)
            if step is None:
                return None
            items, start = step
            for item in items:
                if isinstance(item, RecordRun):
                    for lsn, ts in zip(item.lsns, item.timestamps_ms, strict=True):
                        if ts >= ts_ms:
                            return int(lsn)
        return None


def before_loss(items: list[Item]) -> tuple[list[Item], GapItem | None]:
    """The items before the first gap of a lost or damaged object, and that
    gap (None: there is none)."""
    for i, item in enumerate(items):
        if isinstance(item, GapItem) and item.type in _UNREADABLE:
            return items[:i], item
    return items, None


def items_of(reply: TierReadReply) -> list[Item]:
    """A ``TierReadReply`` as a reader's items, in LSN order: each batch cut
    to its window (one whose body fails its checksum a CHECKSUM_FAIL gap
    instead), and the gaps."""
    out: list[tuple[int, Item]] = []
    w = reply.windows
    for i, packed in enumerate(reply.batches):
        lo, hi = w[2 * i], w[2 * i + 1]
        if not packed.body_ok():
            out.append((lo, GapItem(GapType.CHECKSUM_FAIL, lo, hi)))
            continue
        view = BatchView(packed, lo, hi)
        if len(view):
            out.append((lo, RecordRun(view, 0, len(view))))
        else:  # a window with none of its batch's records: never skipped silently
            out.append((lo, GapItem(GapType.CHECKSUM_FAIL, lo, hi)))
    g = reply.gaps
    for i in range(0, len(g), 3):
        out.append((g[i + 1], GapItem(GapType(g[i]), g[i + 1], g[i + 2])))
    out.sort(key=lambda pair: pair[0])
    return [item for _, item in out]

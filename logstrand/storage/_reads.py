"""Read streams on a node: the trio shell around ``ReadStreamCore``.

No task per stream: a connection's streams share one task, its *lane*, and a
stream is in the lane's queue only while it has something to do.  A stream
caught up with the release pointer waits in an index by log, touched again
only when that log's release pointer moves; one out of credit waits until the
reader grants more.  A lane takes one step of a stream at a time and puts it
back at the end of the queue, so one long backfill shares its connection with
every tail on it.  An idle stream costs its state and an index entry: no task,
no timer, no message (a client tailing 10,000 logs makes no work on a node
until records arrive).

A step reads LogsDB in a bounded batch through the committer (reads, like
writes, hold the GIL in rocksdict: they run on the event loop), filters what a
node may serve (``_rules.servable``, with the ends of past epochs fetched from
the epoch store once and cached), and sends what the core picks.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol, assert_never

import attrs
import trio

from ..errors import LogstrandError, Status
from ..records import BRIDGE, HOLE
from ..types import format_lsn, lsn_epoch
from ..wire import LOCAL_FLOOR_PROTOCOL, ReadCredit, ReadRecords, StartRead, StopRead
from . import _rules
from ._read_core import READ_BATCH_BYTES, Out, ReadFrom, ReadStreamCore, Report, Wait

if TYPE_CHECKING:
    from ..batch import PackedBatch
    from ..epochstore import EpochEnd
    from ..logsdb import PackedRead, Unreadable
    from ..net import Connection
    from ._metrics import NodeMetrics

_log = logging.getLogger("logstrand.reads")
#: A stream whose step could not read the epoch store tries again after this.
RETRY_S = 0.5
#: Unreadable ranges a node remembers having logged.
CORRUPT_REMEMBERED = 4096


#: Replies a connection's read streams queue ahead of its socket, at most
#: (bytes): one being sent while the next is read.
READ_AHEAD_BYTES = 2 * READ_BATCH_BYTES


class ReadPort(Protocol):
    """What read streams need of the node's LogsDB (the committer)."""

    def read_windows(
        self, log_id: int, step: ReadFrom, core: ReadStreamCore, **limits: Any
    ) -> tuple[PackedRead, list[tuple[PackedBatch, int, int]]]: ...
    def trim_point(self, log_id: int) -> int: ...
    def clean_point(self, log_id: int) -> int: ...
    def local_floor(self, log_id: int) -> int: ...
    def release_of(self, log_id: int) -> int: ...


class EpochEnds(Protocol):
    """How recovery ended past epochs (the epoch store, cached)."""

    async def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None: ...


@attrs.define(eq=False)
class _Stream:
    lane: _Lane
    msg: StartRead
    core: ReadStreamCore
    stopped: bool = False
    queued: bool = False  # in the lane's queue
    idle: bool = False  # in the index of streams waiting for a release
    starved: bool = False  # waiting for credit


@attrs.define(eq=False)
class _Lane:
    """One connection's streams and the queue of those with work."""

    conn: Connection
    streams: dict[int, _Stream] = attrs.Factory(dict)
    ready: collections.deque[_Stream] = attrs.Factory(collections.deque)
    wake: trio.Event = attrs.Factory(trio.Event)
    running: bool = False


@attrs.define(eq=False)
class ReadStreams:
    node_id: int
    db: ReadPort
    ends: EpochEnds
    metrics: NodeMetrics
    nursery: trio.Nursery
    streams_per_connection: int = 16_384
    credit_max: int = 1 << 20
    _lanes: dict[int, _Lane] = attrs.field(init=False, factory=dict)
    #: log -> the streams caught up with its release pointer.
    _idle: dict[int, dict[int, _Stream]] = attrs.field(init=False, factory=dict)
    _open: int = attrs.field(init=False, default=0)
    #: How recovery ended past epochs, fetched once: fixed once released past.
    _epoch_ends: dict[tuple[int, int], EpochEnd | None] = attrs.field(init=False, factory=dict)
    #: Unreadable ranges met since the node started, (log, first, last), each
    #: logged once (bounded: the oldest are forgotten, and may be logged again).
    _corrupt_seen: dict[tuple[int, int, int], None] = attrs.field(init=False, factory=dict)
    corrupt_copies: int = attrs.field(init=False, default=0)

    # -- messages -------------------------------------------------------------

    def start(self, conn: Connection, msg: StartRead) -> None:
        lane = self._lanes.get(id(conn))
        old = lane.streams.get(msg.stream_id) if lane is not None else None
        if old is None and lane is not None and len(lane.streams) >= self.streams_per_connection:
            raise LogstrandError(
                f"{self.streams_per_connection} read streams are open on this connection "
                "(the node's --read-streams-per-connection)",
                Status.OVERLOADED,
            )
        floor = self.db.local_floor(msg.log_id)
        if conn.protocol < LOCAL_FLOOR_PROTOCOL and msg.start_lsn <= floor:
            # Such a reader would take the LSNs this node keeps no more for
            # missing: it is told it cannot read them, not shown a hole.
            raise LogstrandError(
                f"log {msg.log_id}: LSNs up to {format_lsn(floor)} "
                "are in the object store; a reader of protocol 10 or later reads them",
                Status.NOTSUPPORTED,
            )
        if old is not None:
            if msg.generation <= old.msg.generation:
                return  # a late duplicate of an older start
            self._forget(old)
        if lane is None:
            lane = self._lanes[id(conn)] = _Lane(conn)
        core = ReadStreamCore(
            self.node_id,
            msg.start_lsn,
            msg.until_lsn,
            min(msg.credit, self.credit_max),
            scd=msg.scd,
            known_down=msg.known_down,
        )
        st = _Stream(lane, msg, core)
        lane.streams[msg.stream_id] = st
        self._counted(+1)
        if core.next_lsn <= self.db.trim_point(msg.log_id):
            self.metrics.read_gaps.labels("trim").inc()
        self._ready(st)
        if not lane.running:
            lane.running = True
            self.nursery.start_soon(self._serve, lane)

    def credit(self, conn: Connection, msg: ReadCredit) -> None:
        lane = self._lanes.get(id(conn))
        st = lane.streams.get(msg.stream_id) if lane is not None else None
        if st is not None and st.msg.generation == msg.generation:
            st.core.add_credit(min(msg.records, max(0, self.credit_max - st.core.credit)))
            if st.starved:
                st.starved = False
                self._ready(st)

    def stop(self, conn: Connection, msg: StopRead) -> None:
        lane = self._lanes.get(id(conn))
        st = lane.streams.get(msg.stream_id) if lane is not None else None
        if st is not None:
            self._forget(st)

    def busy(self, conn: Connection) -> bool:
        """Has ``conn`` a read stream open (then it is not idle, only quiet)?"""
        lane = self._lanes.get(id(conn))
        return lane is not None and bool(lane.streams)

    def connection_closed(self, conn: Connection) -> None:
        lane = self._lanes.pop(id(conn), None)
        if lane is not None:
            for st in list(lane.streams.values()):
                self._forget(st)
            lane.wake.set()

    def released(self, log_id: int) -> None:
        waiting = self._idle.pop(log_id, None)
        if waiting is not None:
            for st in waiting.values():
                st.idle = False
                self._ready(st)

    @property
    def open_streams(self) -> int:
        return self._open

    # -- bookkeeping -----------------------------------------------------------

    def _ready(self, st: _Stream) -> None:
        if not st.queued and not st.stopped:
            st.queued = True
            st.lane.ready.append(st)
            st.lane.wake.set()

    def _forget(self, st: _Stream) -> None:
        """End a stream: out of its lane and of the idle index."""
        if st.stopped:
            return
        st.stopped = True
        lane = st.lane
        if lane.streams.get(st.msg.stream_id) is st:
            del lane.streams[st.msg.stream_id]
        if st.idle:
            waiting = self._idle.get(st.msg.log_id)
            if waiting is not None:
                waiting.pop(id(st), None)
                if not waiting:
                    del self._idle[st.msg.log_id]
        self._counted(-1)

    def _counted(self, change: int) -> None:
        self._open += change
        self.metrics.read_streams.set(self._open)

    # -- the lane task -----------------------------------------------------------

    async def _serve(self, lane: _Lane) -> None:
        """Steps of the lane's ready streams, one at a time, until it has none."""
        try:
            while lane.streams and not lane.conn.closed:
                if not lane.ready:
                    await lane.wake.wait()
                    lane.wake = trio.Event()
                    continue
                st = lane.ready.popleft()
                st.queued = False
                if not st.stopped:
                    await self._turn(st)
                    # A step reads LogsDB without yielding, and queueing its
                    # reply does not yield while the queue has room: without
                    # this, steps ran back to back until 64 MiB were queued,
                    # and the connection's writer sent the first of them only
                    # then (a reader of 200 MB of 10 KiB records waited 460 ms
                    # for its first batch).  Now the writer sends each reply
                    # while the next step reads.
                    await trio.lowlevel.checkpoint()
        finally:
            lane.running = False

    async def _turn(self, st: _Stream) -> None:
        try:
            await self._step(st)
        except LogstrandError:
            self._forget(st)  # the reader's connection is gone
        except Exception:
            _log.exception("node %d: read stream failed", self.node_id)
            with contextlib.suppress(LogstrandError):
                await self._send(st, Status.FAILED, Out((), (), st.core.next_lsn))
            self._forget(st)

    async def _step(self, st: _Stream) -> None:
        core = st.core
        log_id = st.msg.log_id
        release = self.db.release_of(log_id)
        step = core.step(release)
        # A closed union (``Step``): mypy fails here when a step has no case.
        match step:
            case Report():
                await self._send(st, Status.OK, Out((), (), step.next_lsn))
                self._ready(st)
            case Wait.FINISHED:
                self._forget(st)
            case Wait.IDLE:
                st.idle = True
                self._idle.setdefault(log_id, {})[id(st)] = st
            case Wait.NO_CREDIT:
                st.starved = True
            case ReadFrom():
                await self._read_from(st, step, release)
            case _:
                assert_never(step)

    async def _read_from(self, st: _Stream, step: ReadFrom, release: int) -> None:
        conn = st.lane.conn
        async with conn.bulk:
            # Read ahead of the socket by one reply at most: a step reads
            # LogsDB without yielding, so steps run back to back while
            # the queue has room, and the writer, which gets a turn
            # between them, moves one socket buffer a turn.  With the
            # connection's 64 MiB as the bound, a reader of 200 MB of
            # 10 KiB records waited 460 ms for its first batch.
            await conn.wait_for_room(below=READ_AHEAD_BYTES)
            sent = await self._read_and_send(st, step, release)
        if sent:
            self._ready(st)
        else:
            self.nursery.start_soon(self._later, st)

    async def _later(self, st: _Stream) -> None:
        await trio.sleep(RETRY_S)
        self._ready(st)

    async def _send(self, st: _Stream, status: Status, out: Out) -> None:
        msg = st.msg
        log_id = msg.log_id
        await st.lane.conn.send(
            ReadRecords(
                msg.stream_id,
                msg.generation,
                int(status),
                out.next_lsn,
                self.db.trim_point(log_id),
                out.batches,
                out.windows,
                self.db.clean_point(log_id),
                out.unreadable,
                self.db.local_floor(log_id) if st.lane.conn.protocol >= LOCAL_FLOOR_PROTOCOL else 0,
            )
        )
        st.core.sent(out.next_lsn)
        self.metrics.read_messages.inc()

    async def _read_and_send(self, st: _Stream, step: ReadFrom, release: int) -> bool:
        """One read of LogsDB for a stream, and its reply (the caller holds the
        connection's ``bulk`` lock and there is room in its queue).  False:
        the epoch store was away, try again a little later."""
        core = st.core
        log_id = st.msg.log_id
        got, items = self.db.read_windows(log_id, step, core)
        try:
            items = await self.servable(log_id, items, release)
        except LogstrandError as exc:  # the epoch store is away: try again soon
            _log.warning("node %d: read stream waits: %s", self.node_id, exc)
            return False
        bad = [(u.first_lsn, u.last_lsn) for u in got.unreadable]
        for u in got.unreadable:
            self._corrupt(log_id, u)
        out = core.on_read(items, got.scanned_to, bad)
        self._count(out)
        await self._send(st, Status.OK, out)
        return True

    async def servable(
        self, log_id: int, items: list[tuple[PackedBatch, int, int]], release: int
    ) -> list[tuple[PackedBatch, int, int]]:
        """The windows of copies this node may hand readers at all (also what
        its rebuilding donates: ``Rebuilder``)."""
        current = lsn_epoch(release)
        epochs = sorted(
            {
                e
                for b, _, _ in items
                for e in range(lsn_epoch(b.first_lsn), lsn_epoch(b.last_lsn) + 1)
            }
        )
        epochs = [e for e in epochs if e < current]
        if not epochs:
            return items  # all in the epoch being released: the fast path
        cache = self._epoch_ends
        for e in epochs:
            if (log_id, e) not in cache:
                # Fixed once the release pointer is past the epoch: cached for good.
                cache[log_id, e] = await self.ends.epoch_end(log_id, e)
        return _rules.servable_windows(items, release, lambda e: cache[log_id, e])

    def corrupt_in(self, log_id: int) -> int:
        """Ranges of ``log_id``'s copies found unreadable (of those remembered)."""
        return sum(1 for log, _, _ in self._corrupt_seen if log == log_id)

    def _corrupt(self, log_id: int, u: Unreadable) -> None:
        """Count and log a range of copies that cannot be read, once per range."""
        key = (log_id, u.first_lsn, u.last_lsn)
        if key in self._corrupt_seen:
            return
        if len(self._corrupt_seen) >= CORRUPT_REMEMBERED:
            del self._corrupt_seen[next(iter(self._corrupt_seen))]
        self._corrupt_seen[key] = None
        self.corrupt_copies += 1
        self.metrics.corrupt_copies.inc()
        _log.warning(
            "node %d: log %d lsn %s..%s: copies cannot be read (%s); readers are "
            "told to ask another holder",
            self.node_id,
            log_id,
            format_lsn(u.first_lsn),
            format_lsn(u.last_lsn),
            u.why,
        )

    def _count(self, out: Out) -> None:
        m = self.metrics
        m.read_records.inc(out.records)
        m.read_bytes.inc(sum(b.payload_bytes for b in out.batches))
        for b in out.batches:
            if b.flag_bits & (HOLE | BRIDGE):  # recovery copies: holes and bridges
                flags = b.flags()
                bridges = sum(1 for fl in flags if fl & BRIDGE)
                m.read_gaps.labels("hole").inc(sum(1 for fl in flags if fl & HOLE) - bridges)
                m.read_gaps.labels("bridge").inc(bridges)

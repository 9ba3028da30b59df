"""Read streams on a node: the trio shell around ``ReadStreamCore``.

One task per stream.  It asks the core what to do, reads LogsDB in bounded
batches through the committer (reads, like writes, hold the GIL in
rocksdict: they run on the event loop), filters what a node may serve
(``_rules.servable``, with the ends of past epochs fetched from the epoch store
once and cached), and sends what the core picks.  Newly released records go
out as soon as the release pointer moves.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..errors import LogstrandError, Status
from ..records import BRIDGE, HOLE
from ..types import format_lsn, lsn_epoch
from ..wire import ReadCredit, ReadRecords, StartRead, StopRead
from . import _rules
from ._read_core import Out, ReadFrom, ReadStreamCore, Report, Wait

if TYPE_CHECKING:
    from ..batch import PackedBatch
    from ..epochstore import EpochEnd
    from ..logsdb import PackedRead, Unreadable
    from ..net import Connection
    from ._metrics import NodeMetrics

_log = logging.getLogger("logstrand.reads")
HEARTBEAT_S = 1.0
#: Unreadable ranges a node remembers having logged.
CORRUPT_REMEMBERED = 4096


class ReadPort(Protocol):
    """What read streams need of the node's LogsDB (the committer)."""

    def read_windows(
        self, log_id: int, step: ReadFrom, core: ReadStreamCore, **limits: Any
    ) -> tuple[PackedRead, list[tuple[PackedBatch, int, int]]]: ...
    def trim_point(self, log_id: int) -> int: ...
    def clean_point(self, log_id: int) -> int: ...
    def release_of(self, log_id: int) -> int: ...


class EpochEnds(Protocol):
    """How recovery ended past epochs (the epoch store, cached)."""

    async def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None: ...


@attrs.define(eq=False)
class _Stream:
    conn: Connection
    msg: StartRead
    core: ReadStreamCore
    changed: trio.Event = attrs.Factory(trio.Event)
    stopped: bool = False

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


@attrs.define(eq=False)
class ReadStreams:
    node_id: int
    db: ReadPort
    ends: EpochEnds
    metrics: NodeMetrics
    nursery: trio.Nursery
    streams_per_connection: int = 256
    credit_max: int = 1 << 20
    streams: dict[tuple[int, int], _Stream] = attrs.field(init=False, factory=dict)
    _per_conn: dict[int, int] = attrs.field(init=False, factory=dict)
    _release_events: dict[int, trio.Event] = attrs.field(init=False, factory=dict)
    #: How recovery ended past epochs, fetched once: fixed once released past.
    _epoch_ends: dict[tuple[int, int], EpochEnd | None] = attrs.field(init=False, factory=dict)
    #: Unreadable ranges met since the node started, (log, first, last), each
    #: logged once (bounded: the oldest are forgotten, and may be logged again).
    _corrupt_seen: dict[tuple[int, int, int], None] = attrs.field(init=False, factory=dict)
    corrupt_copies: int = attrs.field(init=False, default=0)

    # -- messages -------------------------------------------------------------

    def start(self, conn: Connection, msg: StartRead) -> None:
        key = (id(conn), msg.stream_id)
        old = self.streams.get(key)
        if old is None and self._open_on(conn) >= self.streams_per_connection:
            raise LogstrandError(
                f"{self.streams_per_connection} read streams are open on this connection",
                Status.OVERLOADED,
            )
        if old is not None:
            if msg.generation <= old.msg.generation:
                return  # a late duplicate of an older start
            old.stopped = True
            old.poke()
        core = ReadStreamCore(
            self.node_id,
            msg.start_lsn,
            msg.until_lsn,
            min(msg.credit, self.credit_max),
            scd=msg.scd,
            known_down=msg.known_down,
        )
        st = _Stream(conn, msg, core)
        self._add(key, st)
        self.nursery.start_soon(self._run, key, st)

    def credit(self, conn: Connection, msg: ReadCredit) -> None:
        st = self.streams.get((id(conn), msg.stream_id))
        if st is not None and st.msg.generation == msg.generation:
            st.core.add_credit(min(msg.records, max(0, self.credit_max - st.core.credit)))
            st.poke()

    def stop(self, conn: Connection, msg: StopRead) -> None:
        st = self._remove((id(conn), msg.stream_id))
        if st is not None:
            st.stopped = True
            st.poke()

    def _add(self, key: tuple[int, int], st: _Stream) -> None:
        if key not in self.streams:
            self._per_conn[key[0]] = self._per_conn.get(key[0], 0) + 1
        self.streams[key] = st

    def _remove(self, key: tuple[int, int]) -> _Stream | None:
        st = self.streams.pop(key, None)
        if st is not None:
            left = self._per_conn[key[0]] - 1
            if left:
                self._per_conn[key[0]] = left
            else:
                del self._per_conn[key[0]]
        return st

    def _open_on(self, conn: Connection) -> int:
        return self._per_conn.get(id(conn), 0)

    def busy(self, conn: Connection) -> bool:
        """Has ``conn`` a read stream open (then it is not idle, only quiet)?"""
        return self._open_on(conn) > 0

    def connection_closed(self, conn: Connection) -> None:
        for key in [k for k in self.streams if k[0] == id(conn)]:
            st = self._remove(key)
            if st is not None:
                st.stopped = True
                st.poke()

    def released(self, log_id: int) -> None:
        ev = self._release_events.pop(log_id, None)
        if ev is not None:
            ev.set()

    def _release_event(self, log_id: int) -> trio.Event:
        ev = self._release_events.get(log_id)
        if ev is None:
            ev = self._release_events[log_id] = trio.Event()
        return ev

    # -- the stream task -------------------------------------------------------

    async def _run(self, key: tuple[int, int], st: _Stream) -> None:
        metrics = self.metrics
        metrics.read_streams.inc()
        if st.core.next_lsn <= self.db.trim_point(st.msg.log_id):
            metrics.read_gaps.labels("trim").inc()
        try:
            await self._serve(st)
        except LogstrandError:
            pass  # the reader's connection is gone
        except Exception:
            _log.exception("node %d: read stream failed", self.node_id)
            with contextlib.suppress(LogstrandError):
                await self._send(st, Status.FAILED, Out((), (), st.core.next_lsn))
        finally:
            metrics.read_streams.dec()
            if self.streams.get(key) is st:
                self._remove(key)

    async def _send(self, st: _Stream, status: Status, out: Out) -> None:
        msg = st.msg
        log_id = msg.log_id
        await st.conn.send(
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
            )
        )
        st.core.sent(out.next_lsn)

    async def _serve(self, st: _Stream) -> None:
        core = st.core
        log_id = st.msg.log_id
        while not st.stopped:
            release = self.db.release_of(log_id)
            step = core.step(release)
            if isinstance(step, Report):
                await self._send(st, Status.OK, Out((), (), step.next_lsn))
            elif step is Wait.FINISHED:
                return
            elif step is Wait.IDLE:
                await self._wait_idle(st, log_id)
                core.waited(self.db.release_of(log_id))
            elif step is Wait.NO_CREDIT:
                await st.changed.wait()
            else:
                assert isinstance(step, ReadFrom)
                async with st.conn.bulk:
                    await st.conn.wait_for_room()
                    await self._read_and_send(st, step, release)

    async def _read_and_send(self, st: _Stream, step: ReadFrom, release: int) -> None:
        """One read of LogsDB for a stream, and its reply (the caller holds the
        connection's ``bulk`` lock and there is room in its queue)."""
        core = st.core
        log_id = st.msg.log_id
        got, items = self.db.read_windows(log_id, step, core)
        try:
            items = await self.servable(log_id, items, release)
        except LogstrandError as exc:  # the epoch store is away: try again soon
            _log.warning("node %d: read stream waits: %s", self.node_id, exc)
            await trio.sleep(0.5)
            return
        bad = [(u.first_lsn, u.last_lsn) for u in got.unreadable]
        for u in got.unreadable:
            self._corrupt(log_id, u)
        out = core.on_read(items, got.scanned_to, bad)
        self._count(out)
        await self._send(st, Status.OK, out)

    async def _wait_idle(self, st: _Stream, log_id: int) -> None:
        """Until a release, a change of the stream, or the heartbeat interval."""
        released = self._release_event(log_id)
        with trio.move_on_after(HEARTBEAT_S):
            async with trio.open_nursery() as waiters:
                waiters.start_soon(_wait_then_cancel, released, waiters.cancel_scope)
                waiters.start_soon(_wait_then_cancel, st.changed, waiters.cancel_scope)

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


async def _wait_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()

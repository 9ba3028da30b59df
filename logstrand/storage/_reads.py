"""Read streams on a node: push a log's records to a reader, in LSN order, up
to the release pointer, within the credit the reader grants.

One task per stream.  It reads LogsDB in bounded batches (in the event loop:
reads, like writes, hold the GIL in rocksdict), keeps only the records this
node must send (single-copy delivery: the first node of the record's copyset
that the reader does not report as down), and reports its position with every
message, also when it sends nothing, so the reader can tell "nothing here"
from "not yet".  Newly released records go out as soon as the RELEASE (or a
STORE carrying the new last-known-good LSN) arrives.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import LogstrandError, Status
from ..sequencer._recovery import FLAG_BRIDGE, FLAG_HOLE, FLAG_WRITTEN_BY_RECOVERY
from ..types import LSN_MAX
from ..wire import ReadCredit, ReadRecords, RecordBatch, StartRead, StopRead
from . import _core

if TYPE_CHECKING:
    from ..logsdb import StoredBatch
    from ..net import Connection
    from ._node import Node

_log = logging.getLogger("logstrand.reads")
READ_BATCH_RECORDS = 2048
READ_BATCH_BYTES = 4 * 1024 * 1024
_EMPTY = RecordBatch.trusted((), (), (), (), ())


@attrs.define(eq=False)
class _Stream:
    conn: Connection
    msg: StartRead
    next_lsn: int
    credit: int
    down: frozenset[int]
    changed: trio.Event = attrs.Factory(trio.Event)
    stopped: bool = False
    reported: int = -1
    me: int = 0
    #: copyset -> True when another node of it sends its records (cached).
    others: dict[tuple[int, ...], bool] = attrs.Factory(dict)

    def not_mine(self, copyset: tuple[int, ...]) -> bool:
        """Under single-copy delivery, does another node send this copyset's records?"""
        theirs = self.others.get(copyset)
        if theirs is None:
            first = next((n for n in copyset if n not in self.down), None)
            # A copyset with every node down: whoever holds it sends it.
            theirs = self.others[copyset] = first is not None and first != self.me
        return theirs

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class ReadStreams:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.streams: dict[tuple[int, int], _Stream] = {}
        self._release_events: dict[int, trio.Event] = {}

    # -- messages -------------------------------------------------------------

    def start(self, conn: Connection, msg: StartRead) -> None:
        key = (id(conn), msg.stream_id)
        old = self.streams.get(key)
        if old is not None:
            if msg.generation <= old.msg.generation:
                return  # a late duplicate of an older start
            old.stopped = True
            old.poke()
        st = _Stream(
            conn,
            msg,
            max(msg.start_lsn, 1),
            msg.credit,
            frozenset(msg.known_down),
            me=self.node.node_id,
        )
        self.streams[key] = st
        self.node.nursery.start_soon(self._run, key, st)

    def credit(self, conn: Connection, msg: ReadCredit) -> None:
        st = self.streams.get((id(conn), msg.stream_id))
        if st is not None and st.msg.generation == msg.generation:
            st.credit += msg.records
            st.poke()

    def stop(self, conn: Connection, msg: StopRead) -> None:
        st = self.streams.pop((id(conn), msg.stream_id), None)
        if st is not None:
            st.stopped = True
            st.poke()

    def connection_closed(self, conn: Connection) -> None:
        for key in [k for k in self.streams if k[0] == id(conn)]:
            st = self.streams.pop(key)
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
        metrics = self.node.metrics
        metrics.read_streams.inc()
        if st.next_lsn <= self.node.db.trim_point(st.msg.log_id):
            metrics.read_gaps.labels("trim").inc()
        try:
            await self._serve(st)
        except LogstrandError:
            pass  # the reader's connection is gone
        except Exception:
            _log.exception("node %d: read stream failed", self.node.node_id)
            with contextlib.suppress(LogstrandError):
                await self._send(st, Status.FAILED, st.next_lsn, _EMPTY)
        finally:
            metrics.read_streams.dec()
            if self.streams.get(key) is st:
                del self.streams[key]

    async def _send(
        self,
        st: _Stream,
        status: Status,
        next_lsn: int,
        batch: RecordBatch,
        waves: tuple[int, ...] = (),
    ) -> None:
        db = self.node.db
        msg = st.msg
        await st.conn.send(
            ReadRecords(
                msg.stream_id,
                msg.generation,
                int(status),
                next_lsn,
                db.trim_point(msg.log_id),
                batch,
                waves,
                db.clean_point(msg.log_id),
            )
        )
        st.reported = next_lsn

    async def _serve(self, st: _Stream) -> None:
        node = self.node
        msg = st.msg
        log_id = msg.log_id
        until = msg.until_lsn
        while not st.stopped:
            limit = min(until, node.release_of(log_id))
            if st.next_lsn > limit:
                if st.reported != st.next_lsn:
                    await self._send(st, Status.OK, st.next_lsn, _EMPTY)
                if st.next_lsn > until:
                    return  # everything up to ``until`` was sent
                released = self._release_event(log_id)
                with trio.move_on_after(1.0):  # also a periodic heartbeat
                    async with trio.open_nursery() as waiters:
                        waiters.start_soon(_wait_then_cancel, released, waiters.cancel_scope)
                        waiters.start_soon(_wait_then_cancel, st.changed, waiters.cancel_scope)
                if st.reported == st.next_lsn and limit == min(until, node.release_of(log_id)):
                    st.reported = -1  # heartbeat: say where we are again
                continue
            if st.credit <= 0:
                await st.changed.wait()
                continue
            want = min(st.credit, READ_BATCH_RECORDS)
            batch = node.db.read_batch(
                log_id,
                st.next_lsn,
                limit,
                max_records=want,
                max_bytes=READ_BATCH_BYTES,
                # Single-copy delivery: runs of records another node sends are
                # passed over without being decoded at all.
                skip=st.not_mine if msg.scd else None,
            )
            next_lsn = batch.scanned_to + 1
            try:
                keep = await self._good(log_id, batch, node.release_of(log_id))
            except LogstrandError as exc:  # the epoch store is away: try again soon
                _log.warning("node %d: read stream waits: %s", node.node_id, exc)
                await trio.sleep(0.5)
                continue
            if msg.scd:
                keep = self._keep(st, batch, keep)
            if keep is None:
                out = batch.to_record_batch()
            else:
                out = RecordBatch.trusted(
                    tuple(batch.lsns[i] for i in keep),
                    tuple(batch.timestamps_ms[i] for i in keep),
                    tuple(batch.flags[i] for i in keep),
                    tuple(batch.keys[i] for i in keep),
                    tuple(batch.payloads[i] for i in keep),
                )
            waves: tuple[int, ...] = ()
            if batch.flag_bits & FLAG_WRITTEN_BY_RECOVERY:
                # Copies written by recoveries: the reader needs their precedence.
                waves = tuple(batch.waves if keep is None else (batch.waves[i] for i in keep))
            metrics = node.metrics
            metrics.read_records.inc(len(out))
            metrics.read_bytes.inc(out.payload_bytes)
            if waves:  # recovery copies: holes and bridges are among them
                bridges = sum(1 for fl in out.flags if fl & FLAG_BRIDGE)
                holes = sum(1 for fl in out.flags if fl & FLAG_HOLE) - bridges
                metrics.read_gaps.labels("hole").inc(holes)
                metrics.read_gaps.labels("bridge").inc(bridges)
            st.credit -= len(out)
            st.next_lsn = next_lsn if next_lsn <= LSN_MAX else LSN_MAX
            await self._send(st, Status.OK, st.next_lsn, out, waves)

    async def _good(self, log_id: int, batch: StoredBatch, release: int) -> list[int] | None:
        """The copies this node may hand readers at all (None: every one)."""
        lsns = batch.lsns
        if not lsns or lsns[0] >> 32 >= release >> 32:
            return None  # all in the epoch being released: the fast path
        ends = self.node.epoch_ends
        view = self.node.view
        i = 0
        while i < len(lsns):
            e = lsns[i] >> 32
            if e >= release >> 32:
                break
            if (log_id, e) not in ends:
                # Fixed once the release pointer is past the epoch: cached for good.
                ends[log_id, e] = await view.astore.call(view.store.epoch_end, log_id, e)
            i = bisect.bisect_left(lsns, (e + 1) << 32, i)
        return _core.servable(lsns, batch.flags, batch.waves, release, lambda e: ends[log_id, e])

    def _keep(self, st: _Stream, batch: StoredBatch, good: list[int] | None) -> list[int] | None:
        """Of the ``good`` copies (None: all), those this node must send under
        single-copy delivery (None: all)."""
        keep = []
        copysets = batch.copysets
        for i in range(len(copysets)) if good is None else good:
            if not st.not_mine(copysets[i]):
                keep.append(i)
        return None if len(keep) == len(copysets) else keep


async def _wait_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()

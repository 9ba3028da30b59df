"""The cleaner: compaction passes for the compacted logs a node sequences.

It runs on a node as an extension (``logstrand node`` adds it) and speaks to
the cluster only as a client does: it reads through the client library (the
reader merges the nodes' copies and only ever sees released records), and
sends the nodes of a log ``DropCopies`` and ``CleanPoint`` with
``client.ask_nodes``/``tell_nodes``.  The decisions are pure (``_core``); each
node's part, dropping its copies, is ``storage/_drops.py``.

A pass only ever removes copies at or below its end, and only those the
offset map says a newer record of the key supersedes (or tombstones past
their horizon), so it can stop anywhere: a node or cleaner that dies in the
middle leaves every key's latest record in place, and the clean point in the
epoch store moves only when every node has done its part.  The next pass
goes over the same ground again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import numpy as np
import trio

from ..client._lazy import LazyClient
from ..errors import LogstrandError, Status
from ..types import TAIL
from ..wire import CleanPoint, Compact, CompactReply, DropCopies, DropReply
from ._core import Candidate, PassStats, order
from ._offset_map import OffsetMap, hash_keys, map_bytes_for
from ._shell import Throttle, compacted_attributes

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from prometheus_client import Counter, Gauge

    from ..client import AsyncClient, LogSegment
    from ..epochstore import AsyncEpochStore, LogAttributes, LogRange
    from ..net import Connection
    from ..security import Credentials

_log = logging.getLogger("logstrand.cleaner")

#: Keys a pass's map has room for beyond the records counted above the clean
#: point when it starts: those appended while it reads.
DIRTY_SLACK = 4096


@attrs.frozen
class CleanerOptions:
    #: How often the cleaner looks for a compacted log to clean (0: never by
    #: itself; ``client.compact`` still runs a pass).
    interval_s: float = 15.0
    #: The offset map's memory at most (24 bytes a key, filled to 90%); a
    #: pass takes what the records above its clean point need of it.
    map_bytes: int = 64 * 1024 * 1024
    #: Bytes a second the cleaner reads and each node scans (0: no limit).
    io_bytes_s: int = 0
    #: How long the cleaner waits for the nodes to drop their copies.
    drop_timeout_s: float = 600.0
    #: Map entries one DropCopies carries (24 bytes each: 12 MiB, far under
    #: a frame's 32 MiB).  A larger map goes in parts, each its own keys, one
    #: after the other: a copy is dropped by the part that holds its key.
    drop_entries_max: int = 512 * 1024


class _View(Protocol):
    @property
    def astore(self) -> AsyncEpochStore: ...
    @property
    def ranges(self) -> list[LogRange]: ...

    def log_attributes(self, log_id: int) -> LogAttributes | None: ...
    async def refresh(self) -> None: ...


class _Sequenced(Protocol):
    """The logs the node runs a sequencer of (``sequencer._host_queries.Sequenced``)."""

    def __contains__(self, log_id: object) -> bool: ...
    def __iter__(self) -> Iterator[int]: ...
    def most(self) -> int: ...


class CleanerHost(Protocol):
    """What the cleaner needs of the node it runs on."""

    @property
    def url(self) -> str: ...
    @property
    def node_id(self) -> int: ...
    @property
    def view(self) -> _View: ...
    @property
    def metrics(self) -> CleanerMetrics: ...
    @property
    def credentials(self) -> Credentials | None: ...
    def sequenced_logs(self) -> _Sequenced: ...
    def clock_ms(self) -> int: ...
    def register(
        self, message_type: type, handler: Callable[[Connection, Any], Awaitable[None]]
    ) -> None: ...


class CleanerMetrics(Protocol):
    """The node's compaction metrics (``storage._metrics``)."""

    compaction_passes: Counter
    compaction_map_fill: Gauge
    compaction_uncleanable: Counter


class Cleaner:
    """The cleaner of one node (see the module docstring)."""

    def __init__(self, options: CleanerOptions | None = None) -> None:
        self.options = options or CleanerOptions()
        self._locks: dict[int, trio.Lock] = {}
        self._client: LazyClient | None = None
        self._host: CleanerHost | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def host(self) -> CleanerHost:
        assert self._host is not None, "the cleaner is not running"
        return self._host

    @property
    def metrics(self) -> CleanerMetrics:
        return self.host.metrics

    async def run(
        self, host: CleanerHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Answer COMPACT, and clean in the background, until cancelled."""
        self._host = host
        self._client = LazyClient(host.url, host.credentials)
        host.register(Compact, self._handle_compact)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            interval = self.options.interval_s
            while interval > 0:
                await trio.sleep(interval)
                try:
                    await self._clean_round()
                except LogstrandError as exc:
                    _log.warning("node %d: cleaner: %s", host.node_id, exc)
                except Exception:
                    # A bug in a pass must not take the node down: say so, go on.
                    self.metrics.compaction_uncleanable.labels("error").inc()
                    _log.exception("node %d: cleaner failed", host.node_id)
            await trio.sleep_forever()

    async def client(self) -> AsyncClient:
        """The client the cleaner reads with (opened on first use)."""
        assert self._client is not None
        assert self._nursery is not None
        return await self._client.get(self._nursery)

    # -- choosing and running passes -------------------------------------------

    async def _clean_round(self) -> None:
        """Clean every compacted log that is due, dirtiest first, one pass
        after the other (not one log per interval: ten thousand compacted
        logs would each wait 42 hours for their turn)."""
        for chosen in await self._due():
            _log.info(
                "node %d: cleaning log %d (dirty ratio %.2f)",
                self.host.node_id,
                chosen.log_id,
                chosen.dirty_ratio,
            )
            with contextlib.suppress(LogstrandError):  # counted and logged; the next one
                await self.run_pass(chosen.log_id)

    def _compacted_here(self) -> list[int]:
        """The compacted logs this node sequences, looked for among the
        compacted ranges or among its sequencers, whichever are fewer: a
        round costs what is compacted, never a look at every log."""
        ranges = [r for r in self.host.view.ranges if r.attributes.compacted]
        if not ranges:
            return []
        sequenced = self.host.sequenced_logs()
        if sum(r.last - r.first + 1 for r in ranges) <= sequenced.most():
            return [log for r in ranges for log in range(r.first, r.last + 1) if log in sequenced]
        return sorted(log for log in sequenced if any(log in r for r in ranges))

    async def _due(self) -> list[Candidate]:
        host = self.host
        logs = self._compacted_here()
        if not logs:
            return []
        client = await self.client()
        now = host.clock_ms()
        candidates = []
        for log in logs:
            attrs_ = await self._attributes(log)
            state = await host.view.astore.compaction(log) or {}
            candidates.append(
                Candidate(
                    log,
                    await client.data_size(log),
                    int(state.get("clean_bytes", 0)),
                    attrs_.min_cleanable_ratio,
                    oldest_dirty_ms=await self._oldest_dirty_ms(
                        log, int(state.get("clean_point", 0))
                    ),
                    max_compaction_lag_ms=attrs_.max_compaction_lag_ms,
                )
            )
        return order(candidates, now)

    async def _new_map(self, log: int, clean_point: int) -> OffsetMap:
        """The offset map of a pass from ``clean_point``.  Each record above
        it adds at most one key: the map has room for the records the nodes'
        directories count there (each copy, so up to R times more; an entry
        across the point whole) and for what is appended meanwhile, within
        ``map_bytes``; more ends the pass early (partial), the next goes on."""
        dirty = sum(s.records for s in await self._dirty_segments(log, clean_point))
        return OffsetMap(map_bytes_for(dirty + DIRTY_SLACK, self.options.map_bytes))

    async def _oldest_dirty_ms(self, log: int, clean_point: int) -> int | None:
        segments = await self._dirty_segments(log, clean_point)
        return min((s.min_ts_ms for s in segments), default=None)

    async def _dirty_segments(self, log: int, clean_point: int) -> list[LogSegment]:
        """The nodes' directory entries of ``log`` with records above
        ``clean_point`` (an entry across it whole)."""
        client = await self.client()
        return [s for s in await client.log_directory(log) if s.last_lsn > clean_point]

    async def run_pass(self, log: int) -> PassStats:
        async with self._locks.setdefault(log, trio.Lock()):
            try:
                return await self._pass(log)
            except LogstrandError as exc:
                self.metrics.compaction_uncleanable.labels(exc.status.name.lower()).inc()
                _log.warning("node %d: log %d not cleaned: %s", self.host.node_id, log, exc)
                raise

    async def _read_dirty(
        self, log: int, start: int, map_: OffsetMap, lag_cut_ms: int, throttle: Throttle
    ) -> tuple[int, int, int, bool]:
        """Fill the offset map from released records above ``start``; returns
        (end, records, bytes, partial): a pass covers up to ``end``.

        It reads committed records only (Kafka's cleaner does the same: it
        cleans up to the last stable offset and leaves aborted records out
        of its map).  An aborted record in the map would stand for its key
        and remove the committed value before it; and the reader ends before
        the first record of a transaction still open, whose records may yet
        abort, so the pass does too.  Records of aborted transactions stay
        until a later record of their key supersedes them, and markers
        (without a key) are never removed: committed readers need them."""
        client = await self.client()
        end, records, nbytes, partial = start, 0, 0, False
        async with client.read(log, start + 1, TAIL, isolation="committed") as reader:
            while (batch := await reader.next_columns()) is not None:
                n = len(batch)
                lsns, keys, payloads = batch.lsns, batch.keys, batch.payloads
                # Only records older than min_compaction_lag: stop at the first younger.
                young = next((i for i, t in enumerate(batch.timestamps_ms) if t > lag_cut_ms), n)
                keyed = [i for i in range(young) if keys[i] is not None]
                h = hash_keys([keys[i] for i in keyed])  # type: ignore[misc]
                # Each record adds at most one key: probe for room only when short.
                take = len(keyed) if map_.room >= len(keyed) else map_.fits(h)
                if take < len(keyed):
                    # The map is full: this pass ends before the first key it
                    # has no room for; the next one goes on from there.
                    young = keyed[take]
                    partial = True
                map_.put_many(h[:take], np.array([lsns[i] for i in keyed[:take]]))
                if young:
                    end = lsns[young - 1]
                size = sum(len(p) for p in payloads[:young] if p is not None)
                records += young
                nbytes += size
                await throttle.spent(size)
                if young < n:
                    break
        return max(end, start), records, nbytes, partial

    async def _pass(self, log: int) -> PassStats:
        opts = self.options
        host = self.host
        attrs_ = await self._attributes(log)
        client = await self.client()
        started = time.monotonic()
        now_ms = host.clock_ms()
        state = await host.view.astore.compaction(log) or {}
        clean_before = int(state.get("clean_point", 0))
        offsets = await self._new_map(log, clean_before)
        end, records, nbytes, partial = await self._read_dirty(
            log,
            clean_before,
            offsets,
            now_ms - attrs_.min_compaction_lag_ms,
            Throttle(opts.io_bytes_s),
        )
        horizon = now_ms - attrs_.delete_retention_ms
        entries = offsets.entries()
        nodes = (await client.placement(log)).nodes
        step = 24 * opts.drop_entries_max
        removed: dict[int, tuple[int, int]] = {}
        done_to = end
        parts = range(0, max(len(entries), 1), step)
        for lo in parts:
            part = entries[lo : lo + step]
            done = await self._drop_part(log, nodes, (end, clean_before, horizon), part)
            for r in done:
                was = removed.get(r.node_id, (0, 0))
                removed[r.node_id] = (was[0] + r.removed, was[1] + r.removed_bytes)
            # A node whose release pointer lagged went less far: the clean
            # point is where every node got to, in every part.
            done_to = min(done_to, *(r.done_to for r in done))
        # (``done``: the last part's replies, which say what is left.)
        end = max(clean_before, done_to)
        copies = max(1, attrs_.replication_factor)
        stats = PassStats(
            log_id=log,
            clean_point_before=clean_before,
            clean_point=end,
            records_read=records,
            bytes_read=nbytes,
            keys=offsets.size,
            map_bytes=offsets.nbytes,
            map_fill=round(offsets.fill, 4),
            partial=partial,
            records_removed=sum(n for n, _ in removed.values()) // copies,
            bytes_removed=sum(b for _, b in removed.values()) // copies,
            clean_bytes=sum(r.kept_bytes for r in done) // copies,
            nodes=len(nodes),
            seconds=round(time.monotonic() - started, 3),
            parts=len(parts),
        )
        await host.view.astore.record_compaction(log, end, stats.clean_bytes, stats.to_json())
        with contextlib.suppress(LogstrandError):
            await client.tell_nodes(log, CleanPoint(log, end))
        self.metrics.compaction_passes.inc()
        self.metrics.compaction_map_fill.set(offsets.fill)
        _log.info(
            "node %d: log %d compacted to %d: %d records read, %d removed, %.2fs",
            host.node_id,
            log,
            end,
            records,
            stats.records_removed,
            stats.seconds,
        )
        return stats

    async def _drop_part(
        self, log: int, nodes: tuple[int, ...], span: tuple[int, int, int], part: bytes
    ) -> list[DropReply]:
        """One DropCopies (``span``: end, old clean point, tombstone horizon)
        with ``part`` of the map to every node of the log; their replies."""
        opts = self.options
        end, clean_before, horizon = span
        client = await self.client()
        replies = await client.ask_nodes(
            log,
            lambda rid: DropCopies(rid, log, end, clean_before, horizon, opts.io_bytes_s, part),
            timeout_s=opts.drop_timeout_s,
        )
        failed = [
            n for n in nodes if not isinstance(replies.get(n), DropReply) or replies[n].status
        ]
        if failed:
            raise LogstrandError(
                f"log {log}: nodes {failed} did not finish dropping; the next pass redoes it",
                Status.AGAIN,
            )
        return [replies[n] for n in nodes]

    async def _attributes(self, log: int) -> LogAttributes:
        return await compacted_attributes(self.host.view, log)

    async def _handle_compact(self, conn: Connection, msg: Compact) -> None:
        assert self._nursery is not None
        # A pass can take minutes: never in the connection's receive loop,
        # and the connection waiting for it is not idle (a 5-million-key
        # pass outlasted the node's 600 s idle cut, and its answer was lost).
        conn.working += 1
        self._nursery.start_soon(self._compact, conn, msg)

    async def _compact(self, conn: Connection, msg: Compact) -> None:
        try:
            await self._compact_and_reply(conn, msg)
        finally:
            conn.working -= 1

    async def _compact_and_reply(self, conn: Connection, msg: Compact) -> None:
        try:
            stats = await self.run_pass(msg.log_id)
            reply = CompactReply(msg.request_id, int(Status.OK), json.dumps(stats.to_json()))
        except LogstrandError as exc:
            reply = CompactReply(msg.request_id, int(exc.status), json.dumps({"error": str(exc)}))
        except Exception as exc:
            self.metrics.compaction_uncleanable.labels("error").inc()
            _log.exception("node %d: compaction of log %d failed", self.host.node_id, msg.log_id)
            error = json.dumps({"error": f"the pass failed: {exc!r}"[:1000]})
            reply = CompactReply(msg.request_id, int(Status.FAILED), error)
        await conn.reply(reply)

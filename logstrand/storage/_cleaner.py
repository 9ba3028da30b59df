"""The cleaner: compaction passes for the compacted logs this node sequences,
and this node's part of every pass (dropping its copies).

The decisions are pure (``logstrand.compaction``); this is the trio shell.
The cleaner reads through an ordinary client (the reader merges the nodes'
copies and only ever sees released records) and talks to the nodes with
``DropCopies`` / ``CleanPoint`` like any client.

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
from typing import TYPE_CHECKING, Any

import numpy as np
import trio

from ..compaction import Candidate, OffsetMap, PassStats, choose, drops, hash_keys
from ..errors import LogstrandError, NotFoundError, Status
from ..logsdb._format import FLAG_TOMBSTONE
from ..types import TAIL
from ..wire import CleanPoint, Compact, CompactReply, DropCopies, DropReply

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import LogAttributes
    from ..net import Connection
    from ._node import Node

_log = logging.getLogger("logstrand.cleaner")
SCAN_RECORDS = 4096


class Throttle:
    """Holds a byte rate: ``await spent(n)`` sleeps as needed (0: no limit)."""

    def __init__(self, rate_bytes_s: int) -> None:
        self.rate = rate_bytes_s
        self.start = time.monotonic()
        self.total = 0

    async def spent(self, n: int) -> None:
        self.total += n
        if self.rate <= 0:
            await trio.lowlevel.checkpoint()
            return
        ahead = self.total / self.rate - (time.monotonic() - self.start)
        await trio.sleep(max(0.0, ahead))


class Cleaner:
    def __init__(self, node: Node) -> None:
        self.node = node
        self._client: AsyncClient | None = None
        self._client_ready: trio.Event | None = None
        self._locks: dict[int, trio.Lock] = {}

    # -- the client the cleaner reads with ------------------------------------

    async def client(self) -> AsyncClient:
        if self._client is not None:
            return self._client
        if self._client_ready is None:
            self._client_ready = trio.Event()
            await self.node.nursery.start(self._run_client)
        await self._client_ready.wait()
        return self._started_client()

    def _started_client(self) -> AsyncClient:
        if self._client is None:
            raise LogstrandError("the cleaner's client is not running", Status.NOTREADY)
        return self._client

    async def _run_client(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from ..client import open_client

        async with open_client(self.node.url) as client:
            self._client = client
            assert self._client_ready is not None
            self._client_ready.set()
            task_status.started()
            await trio.sleep_forever()

    # -- choosing and running passes -------------------------------------------

    async def run(self) -> None:
        """Background cleaning: now and then, the dirtiest eligible log."""
        interval = self.node.options.compaction_interval_s
        if interval <= 0:
            return
        while True:
            await trio.sleep(interval)
            try:
                await self._clean_one()
            except LogstrandError as exc:
                _log.warning("node %d: cleaner: %s", self.node.node_id, exc)
            except Exception:
                # A bug in a pass must not take the node down: say so, go on.
                self.node.metrics.compaction_uncleanable.labels("error").inc()
                _log.exception("node %d: cleaner failed", self.node.node_id)

    async def _clean_one(self) -> None:
        node = self.node
        logs = [
            log
            for log in sorted(node.sequencers.sequencers)
            if (a := node.view.log_attributes(log)) is not None and a.compacted
        ]
        if not logs:
            return
        client = await self.client()
        store = node.view.store
        now = int(time.time() * 1000)
        candidates = []
        for log in logs:
            attrs_ = node.view.log_attributes(log)
            assert attrs_ is not None
            state = await node.view.astore.call(store.compaction, log) or {}
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
        chosen = choose(candidates, now)
        if chosen is not None:
            _log.info(
                "node %d: cleaning log %d (dirty ratio %.2f)",
                node.node_id,
                chosen.log_id,
                chosen.dirty_ratio,
            )
            await self.run_pass(chosen.log_id)

    async def _oldest_dirty_ms(self, log: int, clean_point: int) -> int | None:
        client = await self.client()
        entries = [s for s in await client.log_directory(log) if s.last_lsn > clean_point]
        return min((s.min_ts_ms for s in entries), default=None)

    async def run_pass(self, log: int) -> PassStats:
        lock = self._locks.setdefault(log, trio.Lock())
        async with lock:
            try:
                return await self._pass(log)
            except LogstrandError as exc:
                reason = exc.status.name.lower()
                self.node.metrics.compaction_uncleanable.labels(reason).inc()
                _log.warning("node %d: log %d not cleaned: %s", self.node.node_id, log, exc)
                raise

    async def _pass(self, log: int) -> PassStats:
        node = self.node
        opts = node.options
        attrs_ = await self._attributes(log)
        client = await self.client()
        store = node.view.store
        started = time.monotonic()
        now_ms = int(time.time() * 1000)
        state = await node.view.astore.call(store.compaction, log) or {}
        clean_before = int(state.get("clean_point", 0))
        lag_cut = now_ms - attrs_.min_compaction_lag_ms
        offsets = OffsetMap(opts.compaction_map_bytes)
        throttle = Throttle(opts.compaction_io_bytes_s)
        end = clean_before
        records = nbytes = 0
        partial = False
        async with client.read(log, clean_before + 1, TAIL) as reader:
            while (batch := await reader.next_columns()) is not None:
                n = len(batch)
                # Only records older than min_compaction_lag: stop at the first younger.
                young = next((i for i, t in enumerate(batch.timestamps_ms) if t > lag_cut), n)
                keyed = [i for i in range(young) if batch.keys[i] is not None]
                h = hash_keys([batch.keys[i] for i in keyed])  # type: ignore[misc]
                # Each record adds at most one key: probe for room only when short.
                take = len(keyed) if offsets.room >= len(keyed) else offsets.fits(h)
                if take < len(keyed):
                    # The map is full: this pass ends before the first key it
                    # has no room for; the next one goes on from there.
                    young = keyed[take]
                    partial = True
                offsets.put_many(h[:take], np.array([batch.lsns[i] for i in keyed[:take]]))
                if young:
                    end = batch.lsns[young - 1]
                size = sum(len(p) for p in batch.payloads[:young] if p is not None)
                records += young
                nbytes += size
                await throttle.spent(size)
                if young < n:
                    break
        end = max(end, clean_before)
        horizon = now_ms - attrs_.delete_retention_ms
        entries = offsets.entries()
        nodes = await client._read_nodes(log)
        replies: dict[int, Any] = {}

        async def drop_on(n: int) -> None:
            replies[n] = await client._request(
                n,
                lambda rid: DropCopies(
                    rid,
                    log,
                    end,
                    clean_before,
                    horizon,
                    opts.compaction_io_bytes_s,
                    entries,
                ),
                timeout_s=opts.compaction_drop_timeout_s,
            )

        async with trio.open_nursery() as nursery:
            for n in nodes:
                nursery.start_soon(drop_on, n)
        failed = [
            n for n in nodes if not isinstance(replies.get(n), DropReply) or replies[n].status
        ]
        if failed:
            raise LogstrandError(
                f"log {log}: nodes {failed} did not finish dropping; the next pass redoes it",
                Status.AGAIN,
            )
        done = [replies[n] for n in nodes]
        # A node whose release pointer lagged went less far: the clean point
        # is where every node got to.
        end = max(clean_before, min(r.done_to for r in done))
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
            records_removed=sum(r.removed for r in done) // copies,
            bytes_removed=sum(r.removed_bytes for r in done) // copies,
            clean_bytes=sum(r.kept_bytes for r in done) // copies,
            nodes=len(nodes),
            seconds=round(time.monotonic() - started, 3),
        )
        await node.view.astore.call(
            store.record_compaction, log, end, stats.clean_bytes, stats.to_json()
        )
        for n in nodes:
            with contextlib.suppress(LogstrandError):
                link = await client._link(n)
                link.conn.send_nowait(CleanPoint(log, end))
        m = node.metrics
        m.compaction_passes.inc()
        m.compaction_map_fill.set(offsets.fill)
        _log.info(
            "node %d: log %d compacted to %d: %d records read, %d removed, %.2fs",
            node.node_id,
            log,
            end,
            records,
            stats.records_removed,
            stats.seconds,
        )
        return stats

    async def _attributes(self, log: int) -> LogAttributes:
        """The log's attributes (the configuration read again if it is new here);
        only compacted logs are cleaned."""
        view = self.node.view
        attrs_ = view.log_attributes(log)
        if attrs_ is None:
            await view.refresh()
            attrs_ = view.log_attributes(log)
        if attrs_ is None:
            raise NotFoundError(f"log {log} does not exist")
        if not attrs_.compacted:
            raise LogstrandError(f"log {log} is not compacted", Status.NOTSUPPORTED)
        return attrs_

    async def handle_compact(self, conn: Connection, msg: Compact) -> None:
        try:
            stats = await self.run_pass(msg.log_id)
            reply = CompactReply(msg.request_id, int(Status.OK), json.dumps(stats.to_json()))
        except LogstrandError as exc:
            reply = CompactReply(msg.request_id, int(exc.status), json.dumps({"error": str(exc)}))
        except Exception as exc:
            self.node.metrics.compaction_uncleanable.labels("error").inc()
            _log.exception("node %d: compaction of log %d failed", self.node.node_id, msg.log_id)
            error = json.dumps({"error": f"the pass failed: {exc!r}"[:1000]})
            reply = CompactReply(msg.request_id, int(Status.FAILED), error)
        with contextlib.suppress(LogstrandError):
            await conn.send(reply)

    # -- this node's part -------------------------------------------------------

    async def handle_drop(self, conn: Connection, msg: DropCopies) -> None:
        try:
            reply = await self.drop(msg)
        except (LogstrandError, ValueError) as exc:  # e.g. not compacted, a malformed map
            _log.warning("node %d: drop for log %d refused: %s", self.node.node_id, msg.log_id, exc)
            status = exc.status if isinstance(exc, LogstrandError) else Status.INVALID_PARAM
            reply = DropReply(msg.request_id, int(status), self.node.node_id)
        except Exception:
            _log.exception("node %d: drop for log %d failed", self.node.node_id, msg.log_id)
            reply = DropReply(msg.request_id, int(Status.FAILED), self.node.node_id)
        with contextlib.suppress(LogstrandError):
            await conn.send(reply)

    async def drop(self, msg: DropCopies) -> DropReply:
        """Remove this node's superseded copies at or below ``msg.end_lsn``."""
        node = self.node
        db = node.db
        log = msg.log_id
        await self._attributes(log)  # refuses a log that is not compacted
        offsets = OffsetMap.from_entries(msg.offsets)
        # Only released records are ever cleaned, as this node knows them.
        end = min(msg.end_lsn, node.release_of(log))
        # Readers may take LSNs missing up to here for compacted from now on:
        # only superseded copies go, never a key's latest record.
        db.set_clean_point(log, end)
        throttle = Throttle(msg.rate_bytes_s)
        scanned = removed = removed_bytes = kept_bytes = 0
        lsn = db.trim_point(log) + 1
        while lsn <= end:
            batch = db.read_batch(log, lsn, end, max_records=SCAN_RECORDS)
            if not batch.lsns:
                break
            tomb = [bool(f & FLAG_TOMBSTONE) for f in batch.flags]
            gone = drops(
                batch.lsns,
                batch.timestamps_ms,
                batch.keys,
                tomb,
                offsets,
                end=end,
                old_clean_point=msg.old_clean_point,
                tombstone_horizon_ms=msg.tombstone_horizon_ms,
            )
            sizes = [len(p) if p is not None else 0 for p in batch.payloads]
            if gone:
                db.delete(log, [batch.lsns[i] for i in gone], sync=False, present=True)
            gone_bytes = sum(sizes[i] for i in gone)
            scanned += len(batch.lsns)
            removed += len(gone)
            removed_bytes += gone_bytes
            kept_bytes += sum(sizes) - gone_bytes
            lsn = batch.scanned_to + 1
            await throttle.spent(sum(sizes))
        await trio.to_thread.run_sync(db.reclaim, log, limiter=node._db_limiter)
        node.metrics.compaction_records_removed.inc(removed)
        node.metrics.compaction_bytes_removed.inc(removed_bytes)
        return DropReply(
            msg.request_id,
            int(Status.OK),
            node.node_id,
            scanned,
            removed,
            removed_bytes,
            kept_bytes,
            end,
        )

    def on_clean_point(self, msg: CleanPoint) -> None:
        with contextlib.suppress(LogstrandError):
            self.node.db.set_clean_point(msg.log_id, msg.lsn)

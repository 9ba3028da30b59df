"""A node's part of compaction: dropping its superseded copies (DROP_COPIES)
and taking a pass's clean point (CLEAN_POINT).

The cleaner (``logstrand.compaction._cleaner``, on the log's sequencer node)
decides what goes with an offset map and sends it to every node of the log;
each node scans its own copies up to the pass's end, removes those the map
says a newer record of their key supersedes (or tombstones past their
horizon), syncs, gives the space back, and says how far it got.  Only
released records are ever cleaned, and only compacted logs.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ..compaction import OffsetMap, drops
from ..compaction._shell import Throttle, compacted_attributes
from ..errors import LogstrandError, Status
from ..records import TOMBSTONE
from ..wire import CleanPoint, DropCopies, DropReply
from ._reads import ReadPort

if TYPE_CHECKING:
    from ..logsdb import StoredBatch
    from ..net import Connection
    from ..rpc import ClusterView
    from ._metrics import NodeMetrics

_log = logging.getLogger("logstrand.cleaner")
SCAN_RECORDS = 4096


class DropPort(ReadPort, Protocol):
    """What dropping copies needs of the node's LogsDB (the committer)."""

    def read_batch(self, log_id: int, start: int, until: int, **limits: Any) -> StoredBatch: ...
    def set_clean_point(self, log_id: int, lsn: int) -> None: ...
    def remove(self, log_id: int, lsns: list[int]) -> None: ...
    async def reclaim(self, log_id: int) -> None: ...


@attrs.define(eq=False)
class Drops:
    node_id: int
    db: DropPort
    view: ClusterView
    metrics: NodeMetrics

    async def handle_drop(self, conn: Connection, msg: DropCopies) -> None:
        try:
            reply = await self.drop(msg)
        except (LogstrandError, ValueError) as exc:  # e.g. not compacted, a malformed map
            _log.warning("node %d: drop for log %d refused: %s", self.node_id, msg.log_id, exc)
            status = exc.status if isinstance(exc, LogstrandError) else Status.INVALID_PARAM
            reply = DropReply(msg.request_id, int(status), self.node_id)
        except Exception:
            _log.exception("node %d: drop for log %d failed", self.node_id, msg.log_id)
            reply = DropReply(msg.request_id, int(Status.FAILED), self.node_id)
        with contextlib.suppress(LogstrandError):
            await conn.send(reply)

    async def drop(self, msg: DropCopies) -> DropReply:
        """Remove this node's superseded copies at or below ``msg.end_lsn``."""
        db = self.db
        log = msg.log_id
        await compacted_attributes(self.view, log)  # refuses a log that is not compacted
        offsets = OffsetMap.from_entries(msg.offsets)
        # Only released records are ever cleaned, as this node knows them.
        end = min(msg.end_lsn, db.release_of(log))
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
            tomb = [bool(f & TOMBSTONE) for f in batch.flags]
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
                db.remove(log, [batch.lsns[i] for i in gone])
            gone_bytes = sum(sizes[i] for i in gone)
            scanned += len(batch.lsns)
            removed += len(gone)
            removed_bytes += gone_bytes
            kept_bytes += sum(sizes) - gone_bytes
            lsn = batch.scanned_to + 1
            await throttle.spent(sum(sizes))
        await db.reclaim(log)
        self.metrics.compaction_records_removed.inc(removed)
        self.metrics.compaction_bytes_removed.inc(removed_bytes)
        return DropReply(
            msg.request_id,
            int(Status.OK),
            self.node_id,
            scanned,
            removed,
            removed_bytes,
            kept_bytes,
            end,
        )

    def on_clean_point(self, msg: CleanPoint) -> None:
        with contextlib.suppress(LogstrandError):
            self.db.set_clean_point(msg.log_id, msg.lsn)

"""The offload: a node moves the old records of the tiered logs it owns to
the object store (docs/tiered-storage.md).

Who: each log has one owner, the storage node first in the log's
rendezvous order over the storage nodes up (the order sequencers are
placed by, so it is most often the node of the log's sequencer).  Views
that differ for a moment may make two owners; both upload, the epoch
store records one (a compare-and-set on the tiered point), and the other
deletes its object.

What: the log's records from past its tiered point (or its trim point)
up to the last one older than ``tier_after`` and acknowledged, read
through the client as any reader reads them (one copy of each record:
the object store holds R=1 of cold data, not R), in objects of about
``object_bytes``.  An object is recorded only once it is in the store
whole (its size read back), so a node killed mid-upload records nothing
and a reader never meets half an object; what it left behind is an
object no segment names.

A trim drops the segments below it from the record, and their objects
from the store, in the owner's next round.

Orphans: an object no segment names (its node was killed after the PUT
and before the record, or failed to delete it) and older than
``orphan_age_s`` (an upload in flight is younger) is deleted.  Each
round looks at ``SWEEP_LOGS`` of the logs the node owns, the next ones
after the last round's: a round's cost does not grow with the logs, and
every log is looked at in turn.
"""

from __future__ import annotations

import logging
import secrets
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..epochstore import SegmentField as F
from ..errors import LogstrandError
from ..placement import rendezvous_owner
from ._format import Batch, Entry, GapEntry, build
from ._objects import ObjectStoreError

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..rpc import ClusterView
    from ._objects import ObjectStore

_log = logging.getLogger("logstrand.tier")
#: Logs one round looks at for orphan objects.
SWEEP_LOGS = 16


@attrs.define
class OffloadStats:
    """What the offload did, for metrics and tests."""

    objects: int = 0
    bytes: int = 0
    records: int = 0
    lost_races: int = 0
    failures: int = 0
    deleted: int = 0
    orphans: int = 0


class Offload:
    """One node's offload rounds (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        view: ClusterView,
        node_id: int,
        object_bytes: int,
        clock_ms: Any,
        orphan_age_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.orphan_age_s = orphan_age_s
        #: The log after which the next sweep for orphans starts.
        self._swept = 0
        self.view = view
        self.node_id = node_id
        self.object_bytes = object_bytes
        self.clock_ms = clock_ms
        self.stats = OffloadStats()
        #: Where this node last read the trim feed (-1: never).
        self._trim_seq = -1

    def owned(self) -> list[tuple[int, int]]:
        """``(log, tier_after_ms)`` of the tiered logs this node owns now:
        over the storage nodes up, so that a log whose owner is down (or
        killed mid-upload) is uploaded by the next one."""
        up = self.view.up
        weights = {n: w for n, w in self.view.storage_weights().items() if n in up}
        out = []
        for r in self.view.ranges:
            after = r.attributes.tier_after_ms
            if after is None:
                continue
            for log in range(r.first, r.last + 1):
                if rendezvous_owner(log, weights) == self.node_id:
                    out.append((log, after))
        return out

    async def round(self, client: AsyncClient) -> None:
        """One pass over the logs this node owns.  What it reads does not
        grow with idle logs: the tails of all of them in one request per
        node (no sequencer activated for a log whose records are all
        released), the tiered points in one read, and the trim points only
        of the logs the trim feed names."""
        owned = self.owned()
        if not owned:
            return
        logs = [log for log, _ in owned]
        astore = self.view.astore
        tails = await client.tail_lsns(logs)
        points = await astore.run(lambda s: s.tier_points(logs))
        seq, trimmed = await astore.run(lambda s: s.trims_changed(self._trim_seq))
        mine = set(logs)
        changed = mine if trimmed is None else mine & set(trimmed)
        now = self.clock_ms()
        undropped = False
        for log, after in owned:
            pending = log in changed
            try:
                if pending:
                    await self.drop_trimmed(log)
                    pending = False
                if tails[log] > points[log]:
                    await self.offload(client, log, now - after, tails[log])
            except (LogstrandError, ObjectStoreError) as exc:
                self.stats.failures += 1
                undropped = undropped or pending
                _log.warning("tier: log %d not offloaded now: %s", log, exc)
            except Exception:
                # A bug met on one log must not take the node down, nor stop
                # the others: said, counted, and the next round tries again.
                self.stats.failures += 1
                undropped = undropped or pending
                _log.exception("tier: log %d: the offload failed", log)
        if not undropped:  # else the feed is read from where it was again
            self._trim_seq = seq
        try:
            await self.sweep(logs)
        except (LogstrandError, ObjectStoreError) as exc:
            _log.warning("tier: the sweep for orphan objects waits: %s", exc)

    async def sweep(self, logs: list[int]) -> None:
        """Delete the orphan objects of the next ``SWEEP_LOGS`` of ``logs``
        (see the module docstring)."""
        after = [log for log in logs if log > self._swept]
        batch = (after + [log for log in logs if log <= self._swept])[:SWEEP_LOGS]
        if not batch:
            return
        self._swept = batch[-1]
        states = await self.view.astore.run(lambda s: {log: s.tier_state(log) for log in batch})
        old = self.clock_ms() / 1000 - self.orphan_age_s
        for log in batch:
            named = {str(seg[F.KEY]) for seg in states[log][1]}
            listed = await trio.to_thread.run_sync(
                self.store.listing, f"logs/{log}/", abandon_on_cancel=True
            )
            for name, written in listed:
                if name in named or written > old:
                    continue
                # Recorded since the listing?  The record is read again first:
                # deleting a named object would lose its records.
                _, segments = await self.view.astore.run(partial(_state_of, log))
                if any(str(seg[F.KEY]) == name for seg in segments):
                    continue
                await trio.to_thread.run_sync(self.store.delete, name, abandon_on_cancel=True)
                self.stats.orphans += 1
                _log.warning("tier: log %d: deleted %s, an object no segment names", log, name)

    async def drop_trimmed(self, log: int) -> None:
        """Forget the segments a trim left behind, and delete their objects."""
        astore = self.view.astore
        trim = await astore.run(lambda s: s.trim_point(log))
        if not trim:
            return
        gone = await astore.run(lambda s: s.drop_tier_segments(log, trim))
        for key in gone:
            await trio.to_thread.run_sync(self.store.delete, key, abandon_on_cancel=True)
            self.stats.deleted += 1

    async def offload(self, client: AsyncClient, log: int, cutoff_ms: int, tail: int) -> None:
        """Upload the log's records past its tiered point, older than
        ``cutoff_ms`` and at or below ``tail``."""
        astore = self.view.astore
        point, _ = await astore.run(lambda s: s.tier_state(log))
        trim = await astore.run(lambda s: s.trim_point(log))
        start = max(point, trim) + 1
        if start > tail:
            return
        boundary = min(await client.find_time(log, cutoff_ms) - 1, tail)
        if boundary < start:
            return
        expect = point
        entries: list[Entry] = []
        size = records = 0
        async with client.read(log, start, boundary) as stream:
            while items := await stream.next_runs():
                for item in items:
                    entry, n = _entry(item)
                    entries.append(entry)
                    records += n
                    size += len(entry.data) if isinstance(entry, Batch) else 16
                    if size < self.object_bytes:
                        continue
                    won = await self._upload(log, expect, entries, records)
                    if won is None:
                        return
                    expect = won
                    entries, size, records = [], 0, 0
        if entries:
            await self._upload(log, expect, entries, records)

    async def _upload(
        self, log: int, expect: int, entries: list[Entry], records: int
    ) -> int | None:
        """Put one object and record it; the new tiered point, or None when
        another upload of the range won."""
        built = build(entries, records)
        key = f"logs/{log}/{built.lo:016x}-{built.hi:016x}-n{self.node_id}-{secrets.token_hex(4)}"
        await trio.to_thread.run_sync(self.store.put, key, built.data, abandon_on_cancel=True)
        size = await trio.to_thread.run_sync(self.store.size, key, abandon_on_cancel=True)
        if size != len(built.data):
            await trio.to_thread.run_sync(self.store.delete, key, abandon_on_cancel=True)
            raise ObjectStoreError(f"{key}: {size} bytes stored of {len(built.data)}")
        won = await self.view.astore.run(
            lambda s: s.record_tier_segment(
                log, expect, built.lo, built.hi, key, size, built.crc, records
            )
        )
        if not won:
            self.stats.lost_races += 1
            await trio.to_thread.run_sync(self.store.delete, key, abandon_on_cancel=True)
            return None
        self.stats.objects += 1
        self.stats.bytes += size
        self.stats.records += records
        _log.info(
            "tier: log %d: LSNs %d..%d in %s (%d records, %d bytes)",
            log, built.lo, built.hi, key, records, size,
        )  # fmt: skip
        return built.hi


def _state_of(log: int, store: Any) -> Any:
    return store.tier_state(log)


def _entry(item: Any) -> tuple[Entry, int]:
    """A reader's item as an object's entry, and how many records it holds."""
    from ..client import GapItem

    if isinstance(item, GapItem):
        return GapEntry(item.type, item.lo, item.hi), 0
    view = item.view
    lsns = item.lsns
    return Batch(view.packed.data, lsns[0], lsns[-1]), len(lsns)

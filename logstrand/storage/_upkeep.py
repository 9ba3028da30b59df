"""A node's upkeep: free space against ``--min-free`` (and reopening a
LogsDB that a full disk broke), and maintenance (trims missed while down,
retention, partition drops)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import attrs
import trio

from .._units import format_bytes
from ..errors import LogstrandError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from collections.abc import Set as AbstractSet

    from ..epochstore import LogAttributes
    from ..rpc import ClusterView
    from ._group_commit import Committer
    from ._metrics import NodeMetrics
    from ._node_store import NodeStore
    from ._options import NodeOptions

_log = logging.getLogger("logstrand.node")
#: A LogsDB broken by a full disk is reopened only with this much free.
REOPEN_FREE_MIN = 8 * 1024 * 1024


@attrs.frozen
class LocalRetention:
    """What tiered logs keep on this node's disk (``--local-retention``):
    per log its retention by time and by bytes, and its tiered point (a
    floor never passes it: what is dropped is in an object)."""

    tiered: Mapping[int, int]
    retention_ms: Mapping[int, int]
    retention_bytes: Mapping[int, int]


@attrs.define(eq=False)
class Upkeep:
    node_id: int
    options: NodeOptions
    committer: Committer
    metrics: NodeMetrics
    view: ClusterView
    data_path: str
    #: Free bytes of the data directory's file system, at the last look.
    free_bytes: int = 0
    #: The trim feed's sequence number this node has applied (-1: none yet).
    _trim_seq: int = -1
    #: The tiered points of the tiered logs this node keeps less of, as the
    #: tier feed (from ``_tier_seq``) last said (``_local_retention``).
    _tiered: dict[int, int] = attrs.field(factory=dict)
    _tier_seq: int = -1
    #: What a pass hands its figures to (a test gives its own).
    apply: Callable[..., None] = attrs.field(kw_only=True, factory=lambda: apply_maintenance)

    async def watch_space(self) -> None:
        """Free space against ``--min-free``: STOREs stop below it, go on above
        it, and a LogsDB that a full disk broke is reopened once space is back."""
        opts = self.options
        committer = self.committer
        was_low = False
        while True:
            st = os.statvfs(self.data_path)
            free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
            floor = max(opts.min_free_bytes, int(opts.min_free_fraction * size))
            low = free < floor
            # Reopening writes a new MANIFEST and WAL: with no room for them it
            # fails after closing the old LogsDB, and the node would be left
            # with none (every read and status failing) until space is back.
            if committer.broken and not low and free >= REOPEN_FREE_MIN:
                try:
                    committer.reopen()
                except Exception as exc:
                    _log.warning("node %d: LogsDB not reopened yet: %s", self.node_id, exc)
            committer.space_low = low
            refusing = low or committer.broken
            if refusing != was_low:
                if refusing:
                    _log.warning(
                        "node %d: %s free of %s (floor %s): STOREs are refused (NOSPC), "
                        "reads go on",
                        self.node_id,
                        format_bytes(free),
                        format_bytes(size),
                        format_bytes(floor),
                    )
                else:
                    _log.warning(
                        "node %d: %s free: STOREs are taken again", self.node_id, format_bytes(free)
                    )
                was_low = refusing
            self.free_bytes = free
            self.metrics.free_bytes.set(free)
            self.metrics.space_low.set(int(refusing))
            await trio.sleep(opts.space_check_s)

    async def maintain(self) -> None:
        """Trims missed while down, retention, partition drops, space gauges."""
        while True:
            try:
                await self._maintain_once()
            except LogstrandError as exc:
                _log.warning("node %d: maintenance: %s", self.node_id, exc)
            except Exception:
                _log.exception("node %d: maintenance failed (tried again later)", self.node_id)
            await trio.sleep(self.options.maintenance_s)

    async def _maintain_once(self) -> None:
        # What a pass costs does not grow with the logs this node holds: the
        # trim points it reads are those the trim feed names (all of them
        # only at the first pass, or when the feed no longer reaches back),
        # and retention looks at the ranges that have one.
        store = self.view.astore
        seq, changed = await store.trims_changed(self._trim_seq)
        kept = any(_kept(r.attributes) for r in self.view.ranges)
        tiered = any(keeps_less_locally(r.attributes) for r in self.view.ranges)
        # The node's logs only when a trim or a retention needs them.
        needed = changed is None or bool(changed) or kept or tiered
        logs = frozenset(self.committer.logs()) if needed else frozenset()
        wanted = sorted(logs) if changed is None else sorted(logs.intersection(changed))
        trims = await store.trim_points(wanted) if wanted else {}
        retention, space = self._retention(logs) if kept else ({}, {})
        local = await self._local_retention(logs) if tiered else None
        self.apply(self.committer, trims, retention, space, local)
        self._trim_seq = seq  # only once applied: a pass that failed reads them again
        await self.committer.merge_small_files()

    async def _local_retention(self, logs: AbstractSet[int]) -> LocalRetention:
        """The tiered logs' local retention on this node, with their tiered
        points: read for the logs the tier feed names (all of them at the
        first pass), so that a pass reads one document when none moved."""
        ms, size = self._bounds(
            logs, "local_retention_ms", "local_retention_bytes", tiered_only=True
        )
        wanted = ms.keys() | size.keys()
        astore = self.view.astore
        seq, changed = await astore.run(lambda s: s.tiers_changed(self._tier_seq))
        known = self._tiered
        stale = wanted - known.keys()
        if changed is None:
            stale = set(wanted)
        elif changed:
            stale |= wanted & set(changed)
        if stale:
            known.update(await astore.run(lambda s: s.tier_points(sorted(stale))))
        for log in known.keys() - wanted:  # no longer tiered here
            del known[log]
        self._tier_seq = seq
        return LocalRetention({log: p for log, p in known.items() if p}, ms, size)

    def _retention(self, logs: AbstractSet[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Each log's time and space retention on this node, from the ranges
        that set one.  The whole log's bound on every node: LogsDB counts the
        log's bytes over the LSNs its entries span, not its own copies."""
        return self._bounds(logs, "retention_ms", "retention_bytes")

    def _bounds(
        self, logs: AbstractSet[int], ms_name: str, bytes_name: str, *, tiered_only: bool = False
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Per log of ``logs``, the bound by time and the bound by bytes that
        its range's attributes ``ms_name`` and ``bytes_name`` set (in the
        ranges of tiered logs only, with ``tiered_only``)."""
        by_ms: dict[int, int] = {}
        by_bytes: dict[int, int] = {}
        for r in self.view.ranges:
            a = r.attributes
            if tiered_only and a.tier_after_ms is None:
                continue
            ms, size = getattr(a, ms_name), getattr(a, bytes_name)
            if ms is None and size is None:
                continue
            for log in in_range(logs, r.first, r.last):
                if ms is not None:
                    by_ms.setdefault(log, ms)
                if size is not None:
                    by_bytes.setdefault(log, size)
        return by_ms, by_bytes


def keeps_less_locally(attributes: LogAttributes) -> bool:
    """Does the range keep less of its tiered logs on the nodes' disks?"""
    return attributes.tier_after_ms is not None and (
        attributes.local_retention_ms is not None or attributes.local_retention_bytes is not None
    )


def _kept(attributes: LogAttributes) -> bool:
    return attributes.retention_ms is not None or attributes.retention_bytes is not None


def in_range(logs: AbstractSet[int], first: int, last: int) -> Iterable[int]:
    """The logs of ``logs`` in ``first..last``, by the smaller side."""
    if last - first + 1 <= len(logs):
        return (log for log in range(first, last + 1) if log in logs)
    return (log for log in logs if first <= log <= last)


def apply_maintenance(
    store: NodeStore,
    trim_points: Mapping[int, int],
    retention_ms: Mapping[int, int],
    retention_bytes: Mapping[int, int] | None = None,
    local: LocalRetention | None = None,
) -> None:
    """Apply trims missed while down, time and space retention, tiered
    logs' local retention, and drop partitions whose records are all
    trimmed (or tiered and past their local retention).  Retention by
    time waits while this node's clock is not measured or is off
    (``NodeClock``)."""
    db = store.db
    for log, point in trim_points.items():
        if point > db.trim_point(log):
            db.trim(log, point)
            store.metrics.trims.inc()
    if not store.clock.trusted:
        retention_ms = {}
    if retention_ms or retention_bytes:
        moved = db.apply_retention(
            retention_ms, now_ms=store.clock.now_ms(), retention_bytes=retention_bytes
        )
        if moved:
            _log.info("node %d: retention trimmed logs %s", store.node_id, sorted(moved))
    if local is not None and local.tiered:
        local_ms = local.retention_ms if store.clock.trusted else {}
        floors = db.apply_local_retention(
            local_ms, local.retention_bytes, local.tiered, now_ms=store.clock.now_ms()
        )
        if floors:
            _log.info("node %d: local floors of tiered logs %s", store.node_id, floors)
    dropped = db.drop_partitions()
    if dropped:
        _log.info("node %d: dropped partitions %s", store.node_id, dropped)
        store.metrics.partitions_dropped.inc(len(dropped))
    store.metrics.partitions.set(len(db.partitions()))
    store.metrics.disk_bytes.set(db.disk_bytes())
    io = db.io_bytes()
    for kind in ("user", "wal", "flush", "compaction", "blob"):
        store.metrics.logsdb_written.labels(kind).set(getattr(io, kind))
    store.metrics.write_amplification.set(io.amplification)

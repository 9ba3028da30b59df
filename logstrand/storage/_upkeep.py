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
    from collections.abc import Iterable
    from collections.abc import Set as AbstractSet

    from ..epochstore import LogAttributes
    from ..rpc import ClusterView
    from ._group_commit import Committer
    from ._metrics import NodeMetrics
    from ._options import NodeOptions

_log = logging.getLogger("logstrand.node")
#: A LogsDB broken by a full disk is reopened only with this much free.
REOPEN_FREE_MIN = 8 * 1024 * 1024


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
        # The node's logs only when a trim or a retention needs them.
        needed = changed is None or bool(changed) or kept
        logs = frozenset(self.committer.logs()) if needed else frozenset()
        wanted = sorted(logs) if changed is None else sorted(logs.intersection(changed))
        trims = await store.trim_points(wanted) if wanted else {}
        retention, space = self._retention(logs) if kept else ({}, {})
        self.committer.maintain(trims, retention, space)
        self._trim_seq = seq  # only once applied: a pass that failed reads them again
        await self.committer.merge_small_files()

    def _retention(self, logs: AbstractSet[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Each log's time and space retention on this node, from the ranges
        that set one."""
        retention: dict[int, int] = {}
        space: dict[int, int] = {}
        for r in self.view.ranges:
            attributes = r.attributes
            if not _kept(attributes):
                continue
            # The whole log's bound on every node: LogsDB counts the log's
            # bytes over the LSNs its entries span, not its own copies.
            ms, size = attributes.retention_ms, attributes.retention_bytes
            for log in _in_range(logs, r.first, r.last):
                if ms is not None:
                    retention.setdefault(log, ms)
                if size is not None:
                    space.setdefault(log, size)
        return retention, space


def _kept(attributes: LogAttributes) -> bool:
    return attributes.retention_ms is not None or attributes.retention_bytes is not None


def _in_range(logs: AbstractSet[int], first: int, last: int) -> Iterable[int]:
    """The logs of ``logs`` in ``first..last``, by the smaller side."""
    if last - first + 1 <= len(logs):
        return (log for log in range(first, last + 1) if log in logs)
    return (log for log in logs if first <= log <= last)

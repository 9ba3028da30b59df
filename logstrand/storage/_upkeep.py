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
        view = self.view
        store = view.astore
        while True:
            try:
                logs = self.committer.logs()
                trims = await store.trim_points(sorted(logs))  # one hop, not one a log
                retention, space = {}, {}
                storage_nodes = max(1, len(view.storage_weights()))
                for log in logs:
                    attributes = view.log_attributes(log)
                    if attributes is None:
                        continue
                    if attributes.retention_ms is not None:
                        retention[log] = attributes.retention_ms
                    if attributes.retention_bytes is not None:
                        # This node's share of the log's bound: R copies over
                        # the nodeset, spread evenly by the copyset choice.
                        nodes = min(attributes.nodeset_size or storage_nodes, storage_nodes)
                        share = attributes.retention_bytes * attributes.replication_factor
                        space[log] = max(1, share // nodes)
                self.committer.maintain(trims, retention, space)
            except LogstrandError as exc:
                _log.warning("node %d: maintenance: %s", self.node_id, exc)
            except Exception:
                _log.exception("node %d: maintenance failed (tried again later)", self.node_id)
            await trio.sleep(self.options.maintenance_s)

"""Rebuilding's documents in the epoch store (``logstrand.rebuilding``).

    rebuilding                  RebuildingState: the nodes being rebuilt or
                                drained, the run under way, the grace period,
                                the markers of the nodes that hold data
    rebuild_progress/<run>/<n>  DonorProgress of donor n in that run

Every change is a read-modify-write of the one ``rebuilding`` document, so
two nodes (or an operator and a node) that change it at once never lose
each other's change.  Each donor writes only its own progress document.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError
from ..rebuilding import DonorProgress, Mode, RebuildingState, _core

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._model import LogRange, NodeConfig


def _now_ms() -> int:
    return int(time.time() * 1000)


class RebuildingDocs:
    """Mixed into ``EpochStore``: needs its ``_doc``, ``_update``, ``nodes``
    and ``log_ranges``."""

    _doc: Callable[[str], Any]
    _update: Callable[[str, Callable[[Any], Any]], Any]
    nodes: Callable[[], dict[int, NodeConfig]]
    log_ranges: Callable[[], list[LogRange]]

    def rebuilding_state(self) -> RebuildingState:
        return RebuildingState.from_json(self._doc("rebuilding"))

    def _change(self, fn: Callable[[RebuildingState], RebuildingState]) -> RebuildingState:
        doc = self._update("rebuilding", lambda d: fn(RebuildingState.from_json(d)).to_json())
        return RebuildingState.from_json(doc)

    def _context(self) -> dict[str, Any]:
        storage = [n for n, c in self.nodes().items() if "storage" in c.roles]
        rs = [r.attributes.replication_factor for r in self.log_ranges()]
        return {
            "storage": storage,
            "replication_min": min(rs, default=1 << 30),
            "now_ms": _now_ms(),
        }

    def request_rebuild(
        self, node_id: int, mode: Mode = Mode.REBUILD, reason: str = "operator"
    ) -> RebuildingState:
        """Start rebuilding (or draining) a node; asking twice is a no-op.

        Raises:
            NotFoundError: no such node.
        """
        if node_id not in self.nodes():
            raise NotFoundError(f"node {node_id} is not in the configuration")
        ctx = self._context()
        return self._change(lambda st: _core.request(st, node_id, mode, reason, **ctx))

    def end_rebuild(self, node_id: int, *, marker: str | None = None) -> RebuildingState:
        """The node is back in service (abort, undrain, or a rebuilt node's
        acknowledgement); ``marker``: its data directory's, recorded as held."""
        ctx = self._context()

        def change(st: RebuildingState) -> RebuildingState:
            st = _core.remove_shard(st, node_id, **ctx)
            if marker is not None:
                st = _core.hold(st, node_id, marker)
            return st

        return self._change(change)

    def undrain(self, node_id: int) -> RebuildingState:
        """Raises NotFoundError when the node is not drained or draining."""
        shard = self.rebuilding_state().shards.get(node_id)
        if shard is None or shard.mode is not Mode.DRAIN:
            raise NotFoundError(f"node {node_id} is not drained")
        return self.end_rebuild(node_id)

    def mark_unrecoverable(self, node_id: int) -> RebuildingState:
        return self._change(lambda st: _core.mark_unrecoverable(st, node_id))

    def set_rebuild_grace(self, grace_ms: int | None) -> RebuildingState:
        return self._change(lambda st: _core.set_grace(st, grace_ms))

    def record_held(self, node_id: int, marker: str) -> RebuildingState:
        """A node with data: its directory's marker (a new node's first start)."""
        return self._change(lambda st: _core.hold(st, node_id, marker))

    def donor_progress(self, run_id: int, donor: int) -> DonorProgress:
        return DonorProgress.from_json(self._doc(f"rebuild_progress/{run_id}/{donor}"))

    def set_donor_progress(self, run_id: int, donor: int, progress: DonorProgress) -> None:
        self._update(f"rebuild_progress/{run_id}/{donor}", lambda _d: progress.to_json())

    def run_progress(self) -> dict[int, DonorProgress]:
        """Each donor's progress in the run under way ({} when none runs)."""
        run = self.rebuilding_state().run
        if run is None:
            return {}
        return {d: self.donor_progress(run.id, d) for d in run.donors}

    def finish_rebuild(self, run_id: int) -> RebuildingState:
        """End run ``run_id`` if every donor reported done (else nothing changes)."""
        st = self.rebuilding_state()
        if st.run is None or st.run.id != run_id:
            return st
        progress = {d: self.donor_progress(run_id, d) for d in st.run.donors}
        now = _now_ms()
        return self._change(lambda s: _core.finish(s, run_id, progress, now))

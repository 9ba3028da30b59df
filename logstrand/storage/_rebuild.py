"""The node's part in rebuilding (decisions: ``logstrand.rebuilding``).

* At start, before serving: the data directory's marker (``LOGSTRAND_NODE``)
  against the one the epoch store recorded: a node that lost its data asks
  to be rebuilt, one that comes back with its data aborts its rebuilding, a
  rebuilt one acknowledges (``rebuilding._core.on_start``).
* Every ``rebuild_poll_s``: read the rebuilding state (and give it to the
  cluster view, so that sequencers stop placing copies on those nodes and
  recovery counts as readers do); as a donor of the run under way, walk this
  node's copies; the lowest live node also starts rebuildings of nodes dead
  past the grace period; a done donor ends the run once every donor is done.
* Donating: ``_donor.Donor``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING

import trio

from ..errors import LogstrandError, Status
from ..rebuilding import Mode, RebuildingState, Run, Start, StorageState, on_start
from ..rebuilding._core import due_for_grace

if TYPE_CHECKING:
    from ..epochstore import EpochStore
    from ..rpc import ClusterView
    from ..wire import StoreReply
    from ._donor import Donor
    from ._metrics import NodeMetrics
    from ._options import NodeOptions

_log = logging.getLogger("logstrand.rebuilding")

MARKER_FILE = "LOGSTRAND_NODE"  # not IDENTITY: RocksDB keeps its own file of that name here


def read_marker(data_dir: str, cluster: str, node_id: int) -> str | None:
    """The marker of ``data_dir`` (None: there is none, the directory is new or wiped).

    Raises:
        LogstrandError: the directory belongs to another node or cluster.
    """
    try:
        with open(os.path.join(data_dir, MARKER_FILE)) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LogstrandError(f"{data_dir}/{MARKER_FILE} cannot be read: {exc}") from exc
    if doc.get("cluster") != cluster or doc.get("node_id") != node_id:
        raise LogstrandError(
            f"{data_dir} holds the data of node {doc.get('node_id')} of cluster "
            f"{doc.get('cluster')!r}, not of node {node_id} of {cluster!r}",
            Status.INVALID_PARAM,
        )
    return str(doc["marker"])


def write_marker(data_dir: str, cluster: str, node_id: int) -> str:
    marker = uuid.uuid4().hex
    path = os.path.join(data_dir, MARKER_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump({"cluster": cluster, "node_id": node_id, "marker": marker}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return marker


def _request_rebuild(node_id: int, reason: str, store: EpochStore) -> RebuildingState:
    return store.request_rebuild(node_id, Mode.REBUILD, reason)


class Rebuilder:
    def __init__(
        self,
        node_id: int,
        view: ClusterView,
        metrics: NodeMetrics,
        options: NodeOptions,
        donor: Donor,
    ) -> None:
        self.node_id = node_id
        self.view = view
        self.metrics = metrics
        self.options = options
        self.donor = donor
        self.marker = ""
        self._donating: tuple[int, trio.CancelScope] | None = None
        self._dead_since: dict[int, int] = {}
        self._last_run_seen: int | None = None
        #: The run this node has finished donating for: it may end the run.
        self._done_run: int | None = None

    # -- start ---------------------------------------------------------------------

    async def on_start(self, marker: str | None, data_dir: str) -> None:
        """Rule 6 of ``rebuilding._core``, before the node serves: ``marker``
        is what the directory held before the LogsDB opened (None: nothing)."""
        store = self.view.astore
        cluster, me = self.view.cluster, self.node_id
        if marker is None:
            marker = await trio.to_thread.run_sync(write_marker, data_dir, cluster, me)
        self.marker = marker
        st = await store.run(lambda s: s.rebuilding_state())
        action = on_start(st, me, marker)
        if action == Start.FIRST:
            st = await store.run(lambda s: s.record_held(me, marker))
        elif action == Start.WIPED:
            _log.warning(
                "node %d: its data directory is new or replaced, but it held data before: "
                "it is rebuilt, and counts for nothing until then",
                me,
            )
            st = await store.run(lambda s: s.request_rebuild(me, Mode.REBUILD, "wiped"))
        elif action in (Start.ABORT, Start.ACK):
            why = "came back with its data" if action == Start.ABORT else "was rebuilt"
            _log.warning("node %d %s: back in service", me, why)
            st = await store.run(lambda s: s.end_rebuild(me, marker=marker))
        self.view.set_rebuilding(st)

    # -- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                st = await self.view.astore.run(lambda s: s.rebuilding_state())
                self.view.set_rebuilding(st)
                st = await self._duties(st, nursery)
                self._gauges(st)
                await trio.sleep(self.options.rebuild_poll_s)

    async def _duties(self, st: RebuildingState, nursery: trio.Nursery) -> RebuildingState:
        store = self.view.astore
        me = self.node_id
        mine = st.shards.get(me)
        if (
            mine is not None
            and mine.mode is Mode.REBUILD
            and mine.state is StorageState.AUTHORITATIVE_EMPTY
        ):
            # Rebuilt while it had no data (wiped, running): every copy it
            # held is elsewhere now, so it is simply in service again.
            marker = self.marker
            st = await store.run(lambda s: s.end_rebuild(me, marker=marker))
            self.view.set_rebuilding(st)
        run = st.run
        if run is not None and me in run.donors:
            if self._donating is None or self._donating[0] != run.id:
                self._stop_donating()
                scope = trio.CancelScope()
                self._donating = (run.id, scope)
                nursery.start_soon(self._donate_supervised, run, scope)
        else:
            self._stop_donating()
        if run is not None and (self._done_run == run.id or self._coordinator()):
            st = await store.run(lambda s: s.finish_rebuild(run.id))
            if st.run is None and st.last is not None:
                self._ended(st)
        if self._coordinator():
            st = await self._grace(st)
        return st

    def _ended(self, st: RebuildingState) -> None:
        last = st.last or {}
        if last.get("id") != self._last_run_seen:
            self._last_run_seen = last.get("id")
            self.metrics.rebuild_seconds.set(last.get("duration_ms", 0) / 1000)
            _log.warning(
                "rebuilding %s of nodes %s ended: %s records, %s bytes, %s",
                last.get("id"),
                last.get("nodes"),
                last.get("records"),
                last.get("bytes"),
                "authoritative" if last.get("authoritative") else "NOT authoritative",
            )

    def _coordinator(self) -> bool:
        """The lowest live node watches for nodes dead past the grace period."""
        alive = self.view.alive
        return bool(alive) and min(alive) == self.node_id

    async def _grace(self, st: RebuildingState) -> RebuildingState:
        now = int(time.time() * 1000)
        storage = {n for n, c in self.view.nodes.items() if "storage" in c.roles}
        for n in storage:
            if n in self.view.alive:
                self._dead_since.pop(n, None)
            else:
                self._dead_since.setdefault(n, now)
        for n in due_for_grace(st, self._dead_since, now):
            _log.warning("node %d dead past the grace period: rebuilding it", n)
            st = await self.view.astore.run(partial(_request_rebuild, n, "grace"))
            self.view.set_rebuilding(st)
        return st

    def _gauges(self, st: RebuildingState) -> None:
        counts = dict.fromkeys(StorageState, 0)
        for n, cfg in self.view.nodes.items():
            if "storage" in cfg.roles:
                counts[st.storage_state(n, n in self.view.alive)] += 1
        for state, count in counts.items():
            self.metrics.storage_states.labels(state.value).set(count)

    def _stop_donating(self) -> None:
        if self._donating is not None:
            self._donating[1].cancel()
            self._donating = None

    async def _donate_supervised(self, run: Run, scope: trio.CancelScope) -> None:
        # Settle from when this node saw the run, on its own clock: the run's
        # start was stamped by whoever asked for it, whose clock may be off.
        settled = trio.current_time() + self.options.rebuild_settle_s
        with scope:
            while True:
                try:
                    await trio.sleep_until(settled)
                    if await self.donor.donate(run):
                        self._done_run = run.id
                    return
                except (LogstrandError, OSError) as exc:
                    _log.warning("node %d: rebuilding %d: %s (going on)", self.node_id, run.id, exc)
                await trio.sleep(1.0)

    def on_store_reply(self, reply: StoreReply) -> bool:
        """Take a STORE reply if it is rebuilding's; True if it was."""
        return self.donor.on_store_reply(reply)

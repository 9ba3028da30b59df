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
* Donating: per log, the stored batches up to the release pointer, from the
  persisted progress on; for each batch this node leads, STORE the batch
  under its new copyset on the chosen nodes, then AMEND the other holders
  and its own copy.  Progress is persisted after each read chunk.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._rate import TokenBucket
from ..errors import LogstrandError, Status
from ..rebuilding import DonorProgress, Mode, RebuildingState, Run, Start, new_copies, on_start
from ..rebuilding._core import due_for_grace
from ..rebuilding._model import StorageState
from ..sequencer._decisions import RECOVERY_STORE_BIT
from ..types import lsn_epoch
from ..wire import Amend, AmendReply, StoreReply
from ._rules import REBUILDING_STORE_BIT, cut_to_windows, donation_windows, rebuilt_copies

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..batch import PackedBatch
    from ..epochstore import EpochStore
    from ..rebuilding import NewCopies
    from ..rpc import ClusterView
    from ._group_commit import Committer
    from ._metrics import NodeMetrics
    from ._options import NodeOptions
    from ._peers import Peers

_log = logging.getLogger("logstrand.rebuilding")

#: STOREs of rebuilding carry this bit in their id (recovery's use bit 63).
MARKER_FILE = "LOGSTRAND_NODE"  # not IDENTITY: RocksDB keeps its own file of that name here
STORE_TIMEOUT_S = 5.0
#: Stored batches re-created at once (each waits for its STOREs' replies).
IN_FLIGHT = 16
CHUNK_BYTES = 4 * 1024 * 1024
ATTEMPTS = 4
#: How long a donor waits for its release pointer to cover the copies it holds.
RELEASE_WAIT_S = 10.0
Windows = list[tuple["PackedBatch", int, int]]


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


def _save(run_id: int, donor: int, progress: DonorProgress, store: EpochStore) -> None:
    store.set_donor_progress(run_id, donor, progress)


@attrs.define
class _Tally:
    """A donor's counts in one run (persisted with its progress), and its metrics."""

    metrics: NodeMetrics
    records: int = 0
    bytes: int = 0
    short: int = 0

    def add(self, records: int, nbytes: int, short: int) -> None:
        self.records += records
        self.bytes += nbytes
        self.short += short
        self.metrics.rebuild_records.inc(records)
        self.metrics.rebuild_bytes.inc(nbytes)
        self.metrics.rebuild_short.inc(short)


class Rebuilder:
    def __init__(
        self,
        node_id: int,
        view: ClusterView,
        committer: Committer,
        peers: Peers,
        metrics: NodeMetrics,
        options: NodeOptions,
        servable: Callable[[int, Windows, int], Awaitable[Windows]],
    ) -> None:
        self.node_id = node_id
        #: The node's reads' rule of which copies readers are served: donors
        #: re-create those only (``_rules.cut_to_windows``).
        self.servable = servable
        self.view = view
        self.committer = committer
        self.peers = peers
        self.metrics = metrics
        self.options = options
        self.marker = ""
        self._store_ids = 0
        self._replies: dict[int, trio.MemorySendChannel[StoreReply]] = {}
        self._donating: tuple[int, trio.CancelScope] | None = None
        self._dead_since: dict[int, int] = {}
        self._rng = random.Random()
        #: ``--rebuild-rate`` with a second's worth of burst (made on first use).
        self._bucket: TokenBucket | None = None
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

    # -- donating --------------------------------------------------------------------

    async def _donate_supervised(self, run: Run, scope: trio.CancelScope) -> None:
        # Settle from when this node saw the run, on its own clock: the run's
        # start was stamped by whoever asked for it, whose clock may be off.
        settled = trio.current_time() + self.options.rebuild_settle_s
        with scope:
            while True:
                try:
                    await trio.sleep_until(settled)
                    await self._donate(run)
                    return
                except (LogstrandError, OSError) as exc:
                    _log.warning("node %d: rebuilding %d: %s (going on)", self.node_id, run.id, exc)
                await trio.sleep(1.0)

    async def _donate(self, run: Run) -> None:
        store = self.view.astore
        me = self.node_id
        progress = await store.run(lambda s: s.donor_progress(run.id, me))
        if progress.done:
            self._done_run = run.id
            return
        if progress.logs:
            _log.info(
                "node %d: resuming rebuilding %d from its progress (per log: %s)",
                me,
                run.id,
                progress.logs,
            )
        else:
            _log.info("node %d: donating for rebuilding %d of nodes %s", me, run.id, run.nodes)
        behind = []
        for log_id in sorted(self.committer.logs()):
            progress = await self._donate_log(run, log_id, progress)
            if progress.logs.get(log_id, 0) < self.committer.last_lsn(log_id):
                behind.append(log_id)
        if behind:
            # Unreleased copies were passed over: the run must not end
            # without them.  Going on from the progress saved, once released.
            raise LogstrandError(f"copies of logs {behind} are not released here yet")
        progress = attrs.evolve(progress, done=True)
        await store.run(partial(_save, run.id, me, progress))
        self._done_run = run.id
        _log.info(
            "node %d: done donating for rebuilding %d: %d records, %d bytes",
            me,
            run.id,
            progress.records,
            progress.bytes,
        )

    async def _donate_log(self, run: Run, log_id: int, progress: DonorProgress) -> DonorProgress:
        store = self.view.astore
        until = await self._released_to(log_id)
        pos = progress.logs.get(log_id, 0) + 1
        if pos > until:
            return progress
        epochs = await store.log_epochs(log_id)
        tally = _Tally(self.metrics, progress.records, progress.bytes, progress.short)
        weights = self.view.storage_weights()
        while pos <= until:
            got = self.committer.read_packed(
                log_id, pos, until, max_records=1 << 20, max_bytes=CHUNK_BYTES, tolerant=True
            )
            work = donation_windows(got.batches, pos, until)
            limiter = trio.CapacityLimiter(IN_FLIGHT)
            async with trio.open_nursery() as nursery:
                for pb in cut_to_windows(await self.servable(log_id, work, until)):
                    meta = epochs.metadata_for(lsn_epoch(pb.first_lsn))
                    nodeset = meta.nodeset if meta is not None else tuple(weights)
                    domains = self.view.domains(meta.replicate_across if meta else "node")
                    place = (nodeset, weights, domains)
                    nursery.start_soon(self._one, run, log_id, pb, place, until, limiter, tally)
            pos = got.scanned_to + 1
            logs = {**progress.logs, log_id: min(got.scanned_to, until)}
            progress = DonorProgress(logs, tally.records, tally.bytes, False, tally.short)
            await store.run(partial(_save, run.id, self.node_id, progress))
            if not got.batches:
                break
        return progress

    async def _released_to(self, log_id: int) -> int:
        """How far to walk ``log_id``: the release pointer, once it covers
        every copy stored here now.  A copy acknowledged but not yet released
        here (its sequencer died, or the RELEASE is on its way) would be
        passed over, and this node's may be the last copy; the node's release
        watch has the log's sequencer release it.  Waits ``RELEASE_WAIT_S``
        at most, then walks what is released."""
        last = self.committer.last_lsn(log_id)
        with trio.move_on_after(RELEASE_WAIT_S):
            # Polled: a tenth of a second is nothing beside a rebuilding.
            while self.committer.release_of(log_id) < last:  # noqa: ASYNC110
                await trio.sleep(0.1)
        release = self.committer.release_of(log_id)
        if release < last:
            _log.warning(
                "node %d: log %d: copies up to %#x are stored here but released only "
                "to %#x after %.0f s: donating the released ones",
                self.node_id,
                log_id,
                last,
                release,
                RELEASE_WAIT_S,
            )
        return release

    async def _one(
        self,
        run: Run,
        log_id: int,
        pb: PackedBatch,
        place: tuple[tuple[int, ...], dict[int, float], dict[int, str]],
        release: int,
        limiter: trio.CapacityLimiter,
        tally: _Tally,
    ) -> None:
        """Re-create one stored batch if this node leads it (``place``: the
        nodeset of its epoch, the nodes' weights and failure domains)."""
        nodeset, weights, domains = place
        view = self.view
        avoid: set[int] = set()
        async with limiter:
            for _ in range(ATTEMPTS):
                plan = new_copies(
                    pb.copyset,
                    run,
                    self.node_id,
                    nodeset,
                    no_writes=view.authority.no_writes,
                    avoid=avoid | {n for n in nodeset if n not in view.alive},
                    weights=weights,
                    domains=domains,
                    rng=self._rng,
                )
                if plan is None:
                    return
                failed = await self._store_copies(log_id, pb, plan, release)
                if not failed:
                    await self._amend(log_id, pb, plan)
                    copies = len(plan.recipients)
                    tally.add(pb.count * copies, len(pb.data) * copies, pb.count * plan.short)
                    return
                avoid |= failed
            tally.add(0, 0, pb.count * sum(n in run.nodes for n in pb.copyset))
            _log.warning(
                "node %d: log %d at %#x: no node took the new copies (tried %s)",
                self.node_id,
                log_id,
                pb.first_lsn,
                sorted(avoid),
            )

    async def _throttle(self, nbytes: int) -> None:
        rate = self.options.rebuild_rate_bytes
        if rate > 0:
            self._bucket = self._bucket or TokenBucket(rate)
            await trio.sleep(self._bucket.take(trio.current_time(), nbytes))

    async def _store_copies(
        self, log_id: int, pb: PackedBatch, plan: NewCopies, release: int
    ) -> set[int]:
        """STORE the new copies; the recipients that did not take theirs."""
        if not plan.recipients:
            return set()
        await self._throttle(len(pb.data) * len(plan.recipients))
        self._store_ids += 1
        msg = rebuilt_copies(self._store_ids, log_id, pb, plan.copyset, release)
        store_id = msg.store_id
        send, receive = trio.open_memory_channel[StoreReply](len(plan.recipients))
        self._replies[store_id] = send
        failed: set[int] = set()
        try:
            waiting = set()
            for n in plan.recipients:
                if await self.peers.send_store(n, msg):
                    waiting.add(n)
                else:
                    failed.add(n)
            with trio.move_on_after(STORE_TIMEOUT_S):
                while waiting:
                    reply = await receive.receive()
                    if reply.node_id in waiting:
                        waiting.discard(reply.node_id)
                        if reply.status != Status.OK:
                            failed.add(reply.node_id)
            failed |= waiting
        finally:
            del self._replies[store_id]
        return failed

    def on_store_reply(self, reply: StoreReply) -> bool:
        """Take a STORE reply if it is rebuilding's; True if it was."""
        if not reply.store_id & REBUILDING_STORE_BIT or reply.store_id & RECOVERY_STORE_BIT:
            return False
        send = self._replies.get(reply.store_id)
        if send is not None:
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                send.send_nowait(reply)
        return True

    async def _amend(self, log_id: int, pb: PackedBatch, plan: NewCopies) -> None:
        old, new = pb.copyset, plan.copyset
        self.committer.db.amend(log_id, pb.first_lsn, pb.last_lsn, old, new)

        def make(rid: int) -> Any:
            return Amend(rid, log_id, pb.first_lsn, pb.last_lsn, old, new)

        for n in plan.amend:
            reply = await self.peers.request(n, make, STORE_TIMEOUT_S)
            if not isinstance(reply, AmendReply) or reply.status != Status.OK:
                # Its copy keeps the old copyset: a later rebuilding of a
                # node of the new one may then miss this batch on it.
                _log.warning(
                    "node %d: log %d at %#x: node %d did not amend its copyset",
                    self.node_id,
                    log_id,
                    pb.first_lsn,
                    n,
                )

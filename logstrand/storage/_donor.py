"""A rebuilding donor's walk over its copies (the node's part: ``_rebuild``).

Per log, the stored batches up to the release pointer, from the persisted
progress on; for each batch this node leads, STORE the batch as it is stored
(re-headered with the new copyset, never re-encoded) on the chosen nodes,
then amend its own copy and AMEND the other holders.  ``IN_FLIGHT``
batches are on their way at once; ``--rebuild-rate`` bounds the bytes sent.
One log at a time: progress (per log, the LSN walked to, and the copies
counted so far) is saved after each read chunk, and must not count copies
of another log's chunk still under way, which a donor that restarts would
count again (4 logs at once did: ``test_donor_killed_mid_rebuild_resumes``).
"""

from __future__ import annotations

import contextlib
import logging
import random
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._rate import TokenBucket
from ..errors import LogstrandError, Status
from ..rebuilding import DonorProgress, Run, new_copies
from ..sequencer._decisions import RECOVERY_STORE_BIT
from ..types import lsn_epoch
from ..wire import Amend, AmendReply, StoreReply
from ._rules import REBUILDING_STORE_BIT, cut_to_windows, donation_windows, rebuilt_copies
from ._upkeep import in_range, keeps_less_locally

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

STORE_TIMEOUT_S = 5.0
#: Stored batches re-created at once (each waits for its STOREs' replies).
IN_FLIGHT = 16
#: Bytes of stored batches read at once per log (a read seeks in every file
#: of a partition: fewer, larger reads).
CHUNK_BYTES = 8 * 1024 * 1024
ATTEMPTS = 4
#: How long a donor waits for its release pointer to cover the copies it holds.
RELEASE_WAIT_S = 10.0
Windows = list[tuple["PackedBatch", int, int]]
Place = tuple[tuple[int, ...], dict[int, float], dict[int, str]]


def _save(run_id: int, donor: int, progress: DonorProgress, store: EpochStore) -> None:
    store.set_donor_progress(run_id, donor, progress)


async def _then_release(work: Callable[[], Awaitable[None]], slot: trio.Semaphore) -> None:
    try:
        await work()
    finally:
        slot.release()


@attrs.define
class _Walk:
    """A donor's state in one run: per log the LSN walked to, its counts
    (persisted with them), and its metrics."""

    run: Run
    metrics: NodeMetrics
    logs: dict[int, int]
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

    def progress(self, done: bool = False) -> DonorProgress:
        return DonorProgress(dict(self.logs), self.records, self.bytes, done, self.short)


class Donor:
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
        self._store_ids = 0
        self._replies: dict[int, trio.MemorySendChannel[StoreReply]] = {}
        self._rng = random.Random()
        #: ``--rebuild-rate`` with a second's worth of burst (made on first use).
        self._bucket: TokenBucket | None = None

    async def donate(self, run: Run) -> bool:
        """Walk this node's copies for ``run`` (from its saved progress);
        True once every copy is done."""
        store = self.view.astore
        me = self.node_id
        saved = await store.run(lambda s: s.donor_progress(run.id, me))
        if saved.done:
            return True
        if saved.logs:
            _log.info("node %d: resuming rebuilding %d from its progress", me, run.id)
        else:
            _log.info("node %d: donating for rebuilding %d of nodes %s", me, run.id, run.nodes)
        walk = _Walk(run, self.metrics, dict(saved.logs), saved.records, saved.bytes, saved.short)
        logs = sorted(self.committer.logs())
        tiered = await self._tiered(logs)
        behind = [log_id for log_id in logs if await self._donate_log(walk, log_id, tiered)]
        if behind:
            # Unreleased copies were passed over: the run must not end
            # without them.  Going on from the progress saved, once released.
            raise LogstrandError(f"copies of logs {behind} are not released here yet")
        await self._save(walk, done=True)
        _log.info(
            "node %d: done donating for rebuilding %d: %d records, %d bytes",
            me,
            run.id,
            walk.records,
            walk.bytes,
        )
        return True

    async def _save(self, walk: _Walk, done: bool = False) -> None:
        progress = walk.progress(done)
        await self.view.astore.run(partial(_save, walk.run.id, self.node_id, progress))

    async def _tiered(self, logs: list[int]) -> dict[int, int]:
        """The tiered points of the logs that keep less on the nodes' disks
        (``--local-retention``), in one read: their copies at or below it are
        in the object store, and the nodes drop theirs, so they are not
        re-created (a node rebuilt after a lost disk downloads nothing, and
        holds no copy it would drop at once)."""
        local = [
            log
            for r in self.view.ranges
            if keeps_less_locally(r.attributes)
            for log in in_range(frozenset(logs), r.first, r.last)
        ]
        if not local:
            return {}
        return await self.view.astore.run(lambda s: s.tier_points(local))

    async def _donate_log(self, walk: _Walk, log_id: int, tiered: dict[int, int]) -> bool:
        """Walk one log; True if copies it held when the walk began were
        left out (not released in time).  Copies stored since need no walk:
        the run's nodes had left every copyset placed by then (the settle),
        and a log appended to without pause always has copies above its
        release pointer, so they must not hold the run open."""
        held = self.committer.last_lsn(log_id)
        until = await self._released_to(log_id, held)
        if tiered.get(log_id, 0) > walk.logs.get(log_id, 0):
            # Done up to there: those copies are in the objects.  (Progress,
            # not only a start: a node whose copies are all tiered is not
            # behind, and must not hold the run open.)
            walk.logs[log_id] = tiered[log_id]
        pos = walk.logs.get(log_id, 0) + 1
        if pos <= until:
            await self._walk_log(walk, log_id, pos, until)
        return walk.logs.get(log_id, 0) < held

    async def _walk_log(self, walk: _Walk, log_id: int, pos: int, until: int) -> None:
        epochs = await self.view.astore.log_epochs(log_id)
        weights = self.view.storage_weights()
        in_flight = trio.Semaphore(IN_FLIGHT)
        while pos <= until:
            got = self.committer.read_packed(
                log_id, pos, until, max_records=1 << 20, max_bytes=CHUNK_BYTES, tolerant=True
            )
            work = donation_windows(got.batches, pos, until)
            async with trio.open_nursery() as nursery:
                for pb in cut_to_windows(await self.servable(log_id, work, until)):
                    meta = epochs.metadata_for(lsn_epoch(pb.first_lsn))
                    nodeset = meta.nodeset if meta is not None else tuple(weights)
                    domains = self.view.domains(meta.replicate_across if meta else "node")
                    place = (nodeset, weights, domains)
                    await in_flight.acquire()  # before the task starts: tasks are bounded too
                    recreate = partial(self._recreate, walk, log_id, pb, place, until)
                    nursery.start_soon(_then_release, recreate, in_flight)
            pos = got.scanned_to + 1
            walk.logs[log_id] = min(got.scanned_to, until)
            await self._save(walk)
            if not got.batches:
                break

    async def _released_to(self, log_id: int, last: int) -> int:
        """How far to walk ``log_id``: the release pointer, once it covers
        ``last``, the last copy stored here when the walk began.  A copy
        acknowledged but not yet released
        here (its sequencer died, or the RELEASE is on its way) would be
        passed over, and this node's may be the last copy; the node's release
        watch has the log's sequencer release it.  Waits ``RELEASE_WAIT_S``
        at most, then walks what is released."""
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

    async def _recreate(
        self,
        walk: _Walk,
        log_id: int,
        pb: PackedBatch,
        place: Place,
        release: int,
    ) -> None:
        """Re-create one stored batch if this node leads it (``place``: the
        nodeset of its epoch, the nodes' weights and failure domains)."""
        nodeset, weights, domains = place
        view, run = self.view, walk.run
        avoid: set[int] = set()
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
                # Its own copy at once: a donor that restarts before the
                # chunk is saved passes over what it amended (no copy twice).
                self.committer.db.amend(log_id, pb.first_lsn, pb.last_lsn, pb.copyset, plan.copyset)
                await self._amend_others(log_id, pb, plan)
                copies = len(plan.recipients)
                walk.add(pb.count * copies, len(pb.data) * copies, pb.count * plan.short)
                return
            avoid |= failed
        walk.add(0, 0, pb.count * sum(n in run.nodes for n in pb.copyset))
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

    async def _amend_others(self, log_id: int, pb: PackedBatch, plan: NewCopies) -> None:
        old, new = pb.copyset, plan.copyset

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

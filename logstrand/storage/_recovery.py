"""The trio shell of recovery: digests in, mutations out, then CLEAN.

A sequencer activated in epoch E has sealed the earlier epochs; this runs,
in the background, for every epoch between the last clean epoch and E:

1. ask the epoch's nodeset for their release pointers: everything up to the
   highest is known good (an epoch already released past its end is done);
2. gather digests (copies above that point) until an f-majority is complete;
3. let ``EpochRecovery`` decide: records, hole plugs, the bridge;
4. write the decisions to R nodes, flagged WRITTEN_BY_RECOVERY with E as
   their seal (sealed nodes accept them), retrying other copysets;
5. record the epoch as clean in the epoch store.

Only then may the new sequencer release its own records.  If anything fails
(too few nodes), it waits and starts again; a recovery that dies half-way is
redone by the next sequencer, whose higher seal wins over whatever this one
wrote.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from ..epochstore import LogEpochs
from ..errors import LogstrandError, StaleError, Status
from ..placement import CopysetSelector
from ..sequencer._recovery import DigestRecord, EpochRecovery, Mutation
from ..wire import Digest, GetDigest, RecordBatch, Release, Store, StoreReply

if TYPE_CHECKING:
    from ..epochstore import EpochMetadata
    from ._node import Node

_log = logging.getLogger("logstrand.recovery")
RECOVERY_STORE_BIT = 1 << 63
_store_ids = itertools.count(1)
CHUNK_RECORDS = 10_000
CHUNK_BYTES = 8 * 1024 * 1024


class Recoveries:
    """Runs recoveries for a node's sequencers; routes their STORE replies."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._waiting: dict[int, tuple[set[int], trio.Event, dict[int, int]]] = {}

    def on_store_reply(self, reply: StoreReply) -> bool:
        """Take a STORE reply if it belongs to a recovery; True if it did."""
        if not reply.store_id & RECOVERY_STORE_BIT:
            return False
        waiting = self._waiting.get(reply.store_id)
        if waiting is not None:
            copyset, done, statuses = waiting
            if reply.node_id in copyset:
                statuses[reply.node_id] = reply.status
                if len(statuses) == len(copyset):
                    done.set()
        return True

    async def recover(self, log_id: int, epoch: int, history: list[EpochMetadata]) -> None:
        """Recover every unclean epoch below ``epoch``; retries until it succeeds."""
        node = self.node
        view = node.view
        backoff = 0.1
        t0 = time.monotonic()
        while True:
            try:
                lce = await view.astore.call(view.store.last_clean_epoch, log_id)
                state = LogEpochs(epoch + 1, tuple(history))
                for e in range(lce + 1, epoch):
                    meta = state.metadata_for(e)
                    if meta is not None:
                        await self._recover_epoch(log_id, e, meta, epoch)
                    with contextlib.suppress(StaleError):  # a later sequencer got further
                        await view.astore.call(view.store.set_last_clean_epoch, log_id, e)
                node.metrics.recovery_seconds.observe(time.monotonic() - t0)
                return
            except LogstrandError as exc:
                _log.warning("node %d: recovery of log %d: %s", node.node_id, log_id, exc)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _recover_epoch(self, log_id: int, e: int, meta: EpochMetadata, seal: int) -> None:
        node = self.node
        infos = []

        async def info(n: int) -> None:
            got = await node.ask_log_info(n, log_id)
            if got is not None:
                infos.append(got)

        async with trio.open_nursery() as nursery:
            for n in meta.nodeset:
                nursery.start_soon(info, n)
        f_majority = len(meta.nodeset) - meta.replication_factor + 1
        if len(infos) < f_majority:
            # Too few answers to trust the known-good point: try again.
            raise LogstrandError(
                f"epoch {e}: {len(infos)} release pointers, need {f_majority}",
                Status.NOSEQUENCER,
            )
        released = max(i.release_lsn for i in infos)
        if released >> 32 > e:
            return  # released past its end already: nothing undecided in it
        lng = released & 0xFFFFFFFF if released >> 32 == e else 0
        rec = EpochRecovery(
            log_id, e, meta.nodeset, meta.replication_factor, seal_epoch=seal, lng_esn=lng
        )
        await self._gather(rec, log_id, e, lng)
        if not rec.ready:
            raise LogstrandError(
                f"epoch {e}: {len(rec.complete)} digests, need {rec.f_majority}",
                Status.NOSEQUENCER,
            )
        plan = rec.decide()
        await self._write(log_id, e, meta, seal, plan)
        # Let readers past the bridge at once, on every node that held the epoch.
        end = (e << 32) | plan[-1].esn
        for n in meta.nodeset:
            await node.send_release(n, Release(log_id, end))
        _log.info(
            "node %d: log %d epoch %d recovered: %d decisions up to ESN %d",
            node.node_id,
            log_id,
            e,
            len(plan),
            plan[-1].esn,
        )

    async def _gather(self, rec: EpochRecovery, log_id: int, e: int, lng: int) -> None:
        node = self.node

        async def from_node(n: int) -> None:
            start = lng + 1
            for _ in range(1000):  # bounded: each round moves ``start`` forward
                if n == node.node_id:
                    reply: Any = node.digest(GetDigest(0, log_id, e, start))
                else:
                    reply = await node.ask_peer(
                        n, lambda rid, s=start: GetDigest(rid, log_id, e, s), timeout_s=5.0
                    )
                if not isinstance(reply, Digest) or reply.status != Status.OK:
                    return
                b = reply.batch
                records = [
                    DigestRecord(lsn & 0xFFFFFFFF, fl, wave, ts, key, payload)
                    for lsn, fl, wave, ts, key, payload in zip(
                        b.lsns,
                        b.flags,
                        reply.waves,
                        b.timestamps_ms,
                        b.keys,
                        b.payloads,
                        strict=True,
                    )
                ]
                rec.on_digest(n, records, complete=reply.complete)
                if reply.complete or not b.lsns:
                    return
                start = (b.lsns[-1] & 0xFFFFFFFF) + 1

        with trio.move_on_after(10.0):
            async with trio.open_nursery() as nursery:
                for n in rec.nodeset:
                    nursery.start_soon(from_node, n)

    async def _write(
        self, log_id: int, e: int, meta: EpochMetadata, seal: int, plan: list[Mutation]
    ) -> None:
        node = self.node
        view = node.view
        selector = CopysetSelector(
            meta.nodeset,
            meta.replication_factor,
            weights=view.storage_weights(),
            domains=view.domains(meta.replicate_across),
        )
        now_ms = node.now_ms()
        for i in range(0, len(plan), CHUNK_RECORDS):
            chunk = plan[i : i + CHUNK_RECORDS]
            batch = RecordBatch.trusted(
                tuple((e << 32) | m.esn for m in chunk),
                tuple(m.timestamp_ms or now_ms for m in chunk),
                tuple(m.flags for m in chunk),
                tuple(m.key for m in chunk),
                tuple(m.payload for m in chunk),
            )
            await self._store_chunk(log_id, seal, selector, batch)

    async def _store_chunk(
        self, log_id: int, seal: int, selector: CopysetSelector, batch: RecordBatch
    ) -> None:
        node = self.node
        excluded: set[int] = {n for n in selector.nodeset if n not in node.view.alive}
        for _ in range(20):
            copyset = selector.select(excluded)
            if copyset is None:
                excluded = {n for n in selector.nodeset if n not in node.view.alive}
                copyset = selector.select(excluded)
                if copyset is None:
                    raise LogstrandError("too few nodes for recovery", Status.NOSEQUENCER)
            store_id = RECOVERY_STORE_BIT | next(_store_ids)
            statuses: dict[int, int] = {}
            done = trio.Event()
            self._waiting[store_id] = (set(copyset), done, statuses)
            msg = Store(store_id, log_id, seal, copyset, 0, True, batch, seal)
            try:
                with trio.move_on_after(3.0):
                    for n in copyset:
                        if not await node.send_store(n, msg):
                            statuses[n] = int(Status.CONNFAILED)
                    if len(statuses) < len(copyset):
                        await done.wait()
            finally:
                del self._waiting[store_id]
            failed = {n for n in copyset if statuses.get(n) != Status.OK}
            if not failed:
                return
            excluded |= failed
        raise LogstrandError("recovery could not store its decisions", Status.NOSEQUENCER)

"""The trio shell around sequencer cores: activation, appends, actions, timers.

One ``SequencerHost`` per node.  It decides whether this node runs a log's
sequencer (rendezvous hashing over live nodes; otherwise REDIRECTED),
activates one on the first APPEND (a new epoch from the epoch store), and
performs what the pure cores ask: STOREs to peers or to this node's own
store queue, replies to clients, RELEASEs to the nodeset.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio
import trio.lowlevel

from ..epochstore import Placement
from ..errors import EpochStoreUnavailableError, LogstrandError, Status
from ..logsdb import KEY_BYTES_MAX
from ..placement import CopysetSelector, select_nodeset
from ..sequencer import ReplyAppend, SendRelease, SendStore, SequencerCore
from ..sequencer import _procedures as procs
from ..wire import Append, AppendReply, GetSeqState, LogInfo, Release, StoreReply

if TYPE_CHECKING:
    from ..net import Connection
    from ..sequencer import Action
    from ._node import Node

_log = logging.getLogger("logstrand.sequencer")


class SequencerHost:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.sequencers: dict[int, SequencerCore] = {}
        self._activating: dict[int, trio.Event] = {}
        # RELEASEs wait for the end of the current burst of work, and only the
        # highest per log goes out; a node that already got a STORE whose
        # release pointer covers it gets none (it releases from the STORE).
        self._releases: dict[int, tuple[tuple[int, ...], int]] = {}
        self._release_wakeup = trio.Event()
        self._release_sent: dict[tuple[int, int], int] = {}
        # Shared by every core this node runs: STORE ids never repeat here.
        self._store_ids = itertools.count(1)

    # -- appends ------------------------------------------------------------

    async def handle_append(self, conn: Connection, msg: Append) -> None:
        node = self.node
        log_id = msg.log_id
        token = (conn, msg.request_id)
        owner = node.view.sequencer_node(log_id)
        # The client came here although the owner is alive in our view: it may
        # have found the owner dead.  Check (a refused connection marks it
        # suspect), then decide again.
        if (
            owner is not None
            and owner != node.node_id
            and owner not in self._reachable()
            and await node._peer(owner) is None
        ):
            owner = node.view.sequencer_node(log_id)
        if owner != node.node_id:
            status = Status.REDIRECTED if owner is not None else Status.NOSEQUENCER
            await self._reply(token, status, redirect=owner, message="sequencer elsewhere")
            return
        attrs_ = node.view.log_attributes(log_id)
        if attrs_ is None:
            await node.view.refresh()
            attrs_ = node.view.log_attributes(log_id)
            if attrs_ is None:
                await self._reply(token, Status.NOTFOUND, message=f"log {log_id} does not exist")
                return
        problem = self._check_records(msg, attrs_.compacted)
        if problem is not None:
            await self._reply(token, problem[0], message=problem[1])
            return
        seq = self.sequencers.get(log_id)
        if seq is None or seq.preempted:
            try:
                seq = await self._activate(log_id)
            except LogstrandError as exc:
                await self._reply(token, exc.status, message=f"cannot activate sequencer: {exc}")
                return
        node.metrics.appends.inc()
        node.metrics.append_records.inc(len(msg.batch))
        node.metrics.append_bytes.inc(msg.batch.payload_bytes)
        now = trio.current_time()
        await self.execute(seq.append(msg.batch, token, now, node.now_ms()))

    def _reachable(self) -> set[int]:
        return {n for n, c in self.node._peers.items() if not c.closed}

    def _check_records(self, msg: Append, compacted: bool) -> tuple[Status, str] | None:
        limit = self.node.options.payload_bytes_max
        for p in msg.batch.payloads:
            if p is None:
                if not compacted:
                    return Status.BADPAYLOAD, "a tombstone (payload None) needs a compacted log"
            elif len(p) > limit:
                return Status.TOOBIG, f"payload of {len(p)} bytes exceeds the limit of {limit}"
        if compacted and None in msg.batch.keys:
            return Status.NOKEY, f"log {msg.log_id} is compacted: every record needs a key"
        # Checked here, before any STORE: a key LogsDB cannot hold would fail the
        # whole group commit it lands in, other clients' records with it.
        if any(k is not None and len(k) > KEY_BYTES_MAX for k in msg.batch.keys):
            return Status.TOOBIG, f"a key is longer than {KEY_BYTES_MAX} bytes"
        return None

    async def _reply(
        self,
        token: tuple[Connection, int],
        status: Status,
        first_lsn: int = 0,
        count: int = 0,
        timestamp_ms: int = 0,
        redirect: int | None = None,
        message: str = "",
    ) -> None:
        conn, request_id = token
        if status != Status.OK:
            self.node.metrics.append_errors.labels(status.name).inc()
        reply = AppendReply(
            request_id, int(status), first_lsn, count, timestamp_ms, redirect, message
        )
        with contextlib.suppress(LogstrandError):  # the client went away; it retries
            await conn.send(reply)

    # -- activation ---------------------------------------------------------

    async def _activate(self, log_id: int) -> SequencerCore:
        """Activate (once, even under concurrent appends) a sequencer for the log."""
        while (pending := self._activating.get(log_id)) is not None:
            await pending.wait()
        seq = self.sequencers.get(log_id)
        if seq is not None and not seq.preempted:
            return seq
        done = self._activating[log_id] = trio.Event()
        try:
            return await self._do_activate(log_id)
        finally:
            del self._activating[log_id]
            done.set()

    async def _do_activate(self, log_id: int) -> SequencerCore:
        node = self.node
        view = node.view
        attrs_ = view.log_attributes(log_id)
        if attrs_ is None:
            raise LogstrandError(f"log {log_id} does not exist", Status.NOTFOUND)
        weights = view.storage_weights()
        domains = view.domains(attrs_.replicate_across)
        nodeset = select_nodeset(
            log_id,
            weights,
            domains,
            size=attrs_.nodeset_size,
            replication=attrs_.replication_factor,
        )
        if len(nodeset) < attrs_.replication_factor:
            raise LogstrandError("not enough storage nodes for the log", Status.NOSEQUENCER)
        placement = Placement(nodeset, attrs_.replication_factor, attrs_.replicate_across)
        try:
            epoch, meta, history = await node.procedures.run(
                procs.activate(log_id, placement, node.options.seal_timeout_s)
            )
        except EpochStoreUnavailableError as exc:
            raise LogstrandError(str(exc), Status.NOSEQUENCER) from exc
        if epoch > 1:  # earlier epochs were sealed
            node.metrics.seals.inc()
        selector = CopysetSelector(
            meta.nodeset,
            meta.replication_factor,
            weights=weights,
            domains=view.domains(meta.replicate_across),
        )
        core = SequencerCore(
            log_id,
            epoch,
            selector,
            sync=attrs_.durability == "fsync",
            # Nothing of this epoch is released before the earlier ones are
            # recovered (or when there are none).
            recovered=epoch == 1,
            appenders_max=node.options.sequencer_appenders_max,
            store_timeout_s=node.options.store_timeout_s,
            ids=self._store_ids,
        )
        core.down.update(n for n in meta.nodeset if n not in view.alive)
        self.sequencers[log_id] = core
        await self._rebroadcast_release(log_id, meta.nodeset)
        if not core.recovered:
            node.nursery.start_soon(self._recover_then_release, log_id, epoch, list(history), core)
        node.metrics.sequencer_activations.inc()
        node.metrics.sequencers.set(len(self.sequencers))
        _log.info("node %d: sequencer for log %d active in epoch %d", node.node_id, log_id, epoch)
        return core

    async def _recover_then_release(
        self, log_id: int, epoch: int, history: list[Any], seq: SequencerCore
    ) -> None:
        def cancelled() -> bool:
            # Overtaken by a newer sequencer, or retired: the next one recovers.
            return seq.preempted or self.sequencers.get(log_id) is not seq

        node = self.node
        if node.options.recovery_grace_s:
            _log.info(
                "node %d: log %d: recovery in %.1fs",
                node.node_id,
                log_id,
                node.options.recovery_grace_s,
            )
            await trio.sleep(node.options.recovery_grace_s)
        if await node.procedures.recover(log_id, epoch, list(history), cancelled):
            await self.execute(seq.set_recovered())

    async def _rebroadcast_release(self, log_id: int, nodeset: tuple[int, ...]) -> None:
        await self.node.procedures.run(procs.rebroadcast_release(log_id, nodeset, 2.0))

    async def handle_get_seq_state(self, conn: Connection, msg: GetSeqState) -> None:
        """Activate the log's sequencer here if this node owns it; answer its state."""
        node = self.node
        status = Status.OK
        if node.view.sequencer_node(msg.log_id) != node.node_id:
            status = Status.REDIRECTED
        elif node.view.log_attributes(msg.log_id) is None:
            status = Status.NOTFOUND
        elif msg.log_id not in self.sequencers:
            try:
                await self._activate(msg.log_id)
            except LogstrandError as exc:
                status = exc.status
        info = node._log_info(LogInfo(msg.request_id, msg.log_id))
        seq = self.sequencers.get(msg.log_id)
        if seq is not None:
            # The tail is every acknowledged append, released yet or not.
            tail = max(info.release_lsn, seq.last_known_good_lsn)
            info = attrs.evolve(info, release_lsn=tail)
        with contextlib.suppress(LogstrandError):
            await conn.send(attrs.evolve(info, status=int(status)))

    # -- actions, replies, timers -------------------------------------------

    async def execute(self, actions: list[Action]) -> None:
        node = self.node
        for action in actions:
            if isinstance(action, SendStore):
                key = (action.message.log_id, action.node_id)
                self._release_sent[key] = max(
                    self._release_sent.get(key, 0), action.message.released_lsn
                )
                if not await node.send_store(action.node_id, action.message):
                    # Could not even send: answer for the node, so a new wave starts.
                    fail = StoreReply(
                        action.message.store_id,
                        action.message.log_id,
                        int(Status.CONNFAILED),
                        action.node_id,
                    )
                    await self.on_store_reply(fail)
            elif isinstance(action, ReplyAppend):
                await self._reply(
                    action.token,
                    action.status,
                    action.first_lsn,
                    action.count,
                    action.timestamp_ms,
                    message=action.message,
                )
            elif isinstance(action, SendRelease):
                self._releases[action.log_id] = (action.nodeset, action.lsn)
                self._release_wakeup.set()

    async def release_flusher(self) -> None:
        """Send the RELEASEs gathered in a burst of work (see ``__init__``)."""
        while True:
            await self._release_wakeup.wait()
            self._release_wakeup = trio.Event()
            for _ in range(2):
                await trio.lowlevel.checkpoint()  # let the tasks that are ready now finish first
            pending, self._releases = self._releases, {}
            for log_id, (nodeset, lsn) in pending.items():
                release = Release(log_id, lsn)
                for n in nodeset:
                    if self._release_sent.get((log_id, n), 0) < lsn:
                        await self.node.send_release(n, release)

    async def on_store_reply(self, reply: StoreReply) -> None:
        if self.node.procedures.on_store_reply(reply):
            return
        seq = self.sequencers.get(reply.log_id)
        if seq is None:
            return
        before = seq.waves_retried
        actions = seq.on_stored(reply.store_id, reply.node_id, reply.status, trio.current_time())
        retried = seq.waves_retried - before
        if retried:
            self.node.metrics.store_waves_retried.inc(retried)
        await self.execute(actions)
        if seq.preempted and seq.idle:
            self._retire(reply.log_id)

    async def tick(self) -> None:
        now = trio.current_time()
        for log_id, seq in list(self.sequencers.items()):
            deadline = seq.next_deadline()
            if deadline is not None and deadline <= now:
                await self.execute(seq.tick(now))
            elif seq.idle and self.node.view.sequencer_node(log_id) != self.node.node_id:
                self._retire(log_id)  # the log moved to another node

    def on_membership(self, old: frozenset[int], new: frozenset[int]) -> None:
        """Tell the cores about nodes that died or came back (their waves move on at once)."""
        gone, back = old - new, new - old
        now = trio.current_time()
        for seq in self.sequencers.values():
            for n in back:
                seq.on_node_up(n)
            actions: list[Any] = []
            for n in gone:
                actions += seq.on_node_down(n, now)
            if actions:
                with contextlib.suppress(RuntimeError):  # the node is shutting down
                    self.node.nursery.start_soon(self.execute, actions)

    def _retire(self, log_id: int) -> None:
        self.sequencers.pop(log_id, None)
        self.node.metrics.sequencers.set(len(self.sequencers))

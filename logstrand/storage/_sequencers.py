"""The trio shell around the node's sequencers.

The rules (routing, activation, recovery, stalls, retirement) live in the
pure ``SequencerHostCore`` (``sequencer/_host.py``), which the seeded
simulation drives too.  This shell feeds it what arrives and performs what
it asks: STOREs to peers or to this node's own store queue, replies to
clients, RELEASEs to the nodeset, activations and recoveries as background
tasks.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol, assert_never

import attrs
import trio
import trio.lowlevel

from .. import _trace
from ..errors import EpochStoreUnavailableError, LogstrandError, Status
from ..records import KEY_BYTES_MAX
from ..sequencer import ConfirmRefusal, ReplyAppend, SendRelease, SendStore, SequencerCore
from ..sequencer._host import (
    Activate,
    HostAction,
    HostOptions,
    Recover,
    RecoveryStalled,
    ReplySeqState,
    SequencerHostCore,
)
from ..wire import Append, AppendReply, GetSeqState, RenewReply, SeqState, StoreReply
from ._activation import Activations

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ..epochstore import LogAttributes
    from ..net import Connection
    from ..rpc import ClusterView, Link
    from ..wire import Renew, Store
    from ._metrics import NodeMetrics
    from ._options import NodeOptions
    from ._procedures import ProcedureRunner
    from ._release_watch import ReleaseWatch

_log = logging.getLogger("logstrand.sequencer")
#: Epochs a stopping node ends at once (``hand_off``).
HANDOFFS_IN_FLIGHT = 256
HANDOFF_POLL_S = 0.05
#: Seconds without one sequencer fewer busy before a hand-off stops waiting.
HANDOFF_STUCK_S = 1.0


class PeerPort(Protocol):
    """How the sequencers reach the nodes (``Peers``)."""

    async def queue_store(self, node_id: int, msg: Store) -> None: ...
    async def send_releases(self, node_id: int, releases: Sequence[tuple[int, int]]) -> None: ...
    async def after_bursts(self) -> None: ...
    def batching(self) -> contextlib.AbstractContextManager[None]: ...
    async def connected(self, node_id: int) -> Link | None: ...
    async def request(self, node_id: int, make: Callable[[int], Any], timeout_s: float) -> Any: ...
    def reachable(self) -> set[int]: ...


class Answerer(Protocol):
    """Where an append's answer goes: its connection, or the gathering of
    an ``AppendMany``'s answers (``_append_many``)."""

    async def reply(self, msg: Any) -> bool: ...


@attrs.define(eq=False)
class SequencerHost:
    node_id: int
    options: NodeOptions
    view: ClusterView
    peers: PeerPort
    procedures: ProcedureRunner
    release_of: Callable[[int], int]
    on_release: Callable[[int, int], None]
    metrics: NodeMetrics
    nursery: trio.Nursery
    #: This node's clock (``NodeClock.now_ms``): what records are stamped with.
    clock_ms: Callable[[], int]
    core: SequencerHostCore = attrs.field(init=False)
    # RELEASEs wait for the end of the current burst of work, and only the
    # highest per log goes out; a node that already got a STORE whose
    # release pointer covers it gets none (it releases from the STORE).
    _releases: dict[int, tuple[tuple[int, ...], int]] = attrs.field(init=False, factory=dict)
    _release_wakeup: trio.Event = attrs.field(init=False, factory=trio.Event)
    _release_sent: dict[tuple[int, int], int] = attrs.field(init=False, factory=dict)
    # Shared by every core this node runs: STORE ids never repeat here.
    _store_ids: Iterator[int] = attrs.field(init=False, factory=lambda: itertools.count(1))
    activations: Activations = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        opts = self.options
        self.activations = Activations(self, self._store_ids)
        self.core = SequencerHostCore(
            self.node_id,
            HostOptions(
                payload_bytes_max=opts.payload_bytes_max,
                key_bytes_max=KEY_BYTES_MAX,
                recovery_stall_s=opts.recovery_stall_s,
            ),
        )

    @property
    def sequencers(self) -> list[int]:
        """The logs this node runs a sequencer of."""
        return self.core.logs()

    # -- from clients ---------------------------------------------------------

    async def handle_append(self, conn: Answerer, msg: Append) -> None:
        if _trace.ON:
            _trace.mark("seq.append")
        owner = await self._owner(msg.log_id)
        attributes = await self._attributes(msg.log_id)
        m = self.metrics
        m.appends.inc()
        m.append_records.inc(len(msg.batch))
        m.append_bytes.inc(msg.batch.payload_bytes)
        actions = self.core.on_append(
            msg.log_id,
            msg.batch,
            (conn, msg.request_id),
            trio.current_time(),
            self.clock_ms(),
            owner=owner,
            attributes=attributes,
        )
        if _trace.ON:
            _trace.mark("seq.sequenced")
        await self.execute(actions)
        if _trace.ON:
            _trace.mark("seq.handled")

    def batching(self) -> contextlib.AbstractContextManager[None]:
        """A burst of appends: their STOREs wait for its end (``Peers``)."""
        return self.peers.batching()

    async def handle_get_seq_state(self, conn: Connection, msg: GetSeqState) -> None:
        """Activate the log's sequencer here if this node owns it; answer its state."""
        owner = await self._owner(msg.log_id)
        attributes = await self._attributes(msg.log_id)
        token = (conn, msg.request_id, msg.log_id)
        await self.execute(
            self.core.on_seq_state(msg.log_id, token, owner=owner, attributes=attributes)
        )

    async def handle_renew(self, conn: Connection, msg: Renew) -> None:
        """Move the sequencers of the logs named that run here to a new epoch
        (host rule 8); answer each one's epoch before (0: none here).

        The view is read again first: a rebalance follows a change of the
        configuration (nodes added), which this node's view may not have yet
        (it is read every ``REFRESH_S``), and the new epochs' nodesets are
        chosen from it."""
        with contextlib.suppress(EpochStoreUnavailableError):
            await self.view.refresh()
        epochs: list[int] = []
        actions: list[HostAction] = []
        for log_id in msg.log_ids:
            epoch, more = self.core.on_renew(log_id)
            epochs.append(epoch)
            actions += more
        renewed = sum(1 for e in epochs if e)
        if renewed:
            _log.info("node %d: %d sequencers move to a new epoch (renewed)", self.node_id, renewed)
        await self.execute(actions)
        await conn.reply(RenewReply(msg.request_id, int(Status.OK), tuple(epochs)))

    async def _owner(self, log_id: int) -> int | None:
        view = self.view
        owner = view.sequencer_node(log_id)
        # The client came here although the owner is alive in our view: it may
        # have found the owner dead.  Check (a refused connection marks it
        # suspect), then decide again.
        if (
            owner is not None
            and owner != self.node_id
            and owner not in self.peers.reachable()
            and await self.peers.connected(owner) is None
        ):
            owner = view.sequencer_node(log_id)
        return owner

    async def _attributes(self, log_id: int) -> LogAttributes | None:
        view = self.view
        attributes = view.log_attributes(log_id)
        if attributes is None:
            with contextlib.suppress(LogstrandError):
                await view.refresh()
            attributes = view.log_attributes(log_id)
        return attributes

    # -- actions ----------------------------------------------------------------

    async def execute(self, actions: list[HostAction]) -> None:
        """Perform the core's actions, and those their outcomes lead to, in order.

        A queue, not recursion: a STORE that cannot be sent is answered for
        its node at once, and the new wave that starts may fail at once too.
        """
        queue = deque(actions)
        while queue:
            action = queue.popleft()
            # A closed union: mypy names the case a new action type lacks.
            match action:
                case SendStore():
                    key = (action.message.log_id, action.node_id)
                    self._release_sent[key] = max(
                        self._release_sent.get(key, 0), action.message.released_lsn
                    )
                    if _trace.ON:
                        local = action.node_id == self.node_id
                        _trace.mark("seq.store_local" if local else "seq.store_sent")
                    # (One that cannot be sent is answered CONNFAILED, as a reply.)
                    await self.peers.queue_store(action.node_id, action.message)
                case ReplyAppend():
                    await self._reply(action)
                case SendRelease():
                    self._releases[action.log_id] = (action.nodeset, action.lsn)
                    self._release_wakeup.set()
                case ReplySeqState():
                    await self._reply_seq_state(action)
                case Activate():
                    self.activations.soon(action.log_id)
                case Recover():
                    self.nursery.start_soon(self._recover, action)
                case ConfirmRefusal():
                    self.nursery.start_soon(self._confirm_refusal, action)
                case RecoveryStalled():
                    self._stalled(action)
                case _:
                    assert_never(action)

    def _stalled(self, action: RecoveryStalled) -> None:
        self.metrics.recovery_stalls.inc()
        _log.error(
            "node %d: log %d: the sequencer of epoch %d has not recovered the earlier "
            "epochs in %.1f s (%d attempts failed; last: %s); appends are refused "
            "until it has",
            self.node_id,
            action.log_id,
            action.epoch,
            action.seconds,
            action.attempts_failed,
            action.error or "none yet",
        )

    async def _confirm_refusal(self, action: ConfirmRefusal) -> None:
        """Rule 6's check before an idempotent batch is refused: has a newer
        epoch been handed out?  (One epoch store read; only refusals pay it.)"""
        try:
            next_epoch = (await self.view.astore.log_epochs(action.log_id)).next_epoch
        except EpochStoreUnavailableError as exc:
            text = f"log {action.log_id}: cannot check the sequencer's epoch: {exc}"
            await self._reply(ReplyAppend(action.reply.token, Status.NOTREADY, message=text))
            return
        actions = self.core.on_refusal_checked(
            action, next_epoch, trio.current_time(), self.clock_ms()
        )
        if action.reply not in actions:
            _log.info(
                "node %d: log %d: epoch %d was sealed by a newer one; the batch goes to a new "
                "sequencer",
                self.node_id,
                action.log_id,
                action.epoch,
            )
        await self.execute(actions)

    async def _reply(self, action: ReplyAppend) -> None:
        conn, request_id = action.token
        if action.status != Status.OK:
            self.metrics.append_errors.labels(action.status.name).inc()
        reply = AppendReply(
            request_id,
            int(action.status),
            action.first_lsn,
            action.count,
            action.timestamp_ms,
            action.redirect,
            action.message,
        )
        await conn.reply(reply)  # the client went away; it retries
        if _trace.ON:
            _trace.mark("seq.replied")

    async def _reply_seq_state(self, action: ReplySeqState) -> None:
        conn, request_id, log_id = action.token
        if conn is None:
            return  # this node asked itself (an overdue release): activation was the point
        now = trio.current_time()
        await conn.reply(self.core.seq_state(action, request_id, self.release_of(log_id), now))

    def acked_tail(self, log_id: int) -> int | None:
        """The acknowledged tail of the log's sequencer here (what ``SeqState``
        says), or None when none runs here."""
        seq = self.core.sequencer(log_id)
        if seq is None:
            return None
        return max(self.release_of(log_id), seq.released_lsn, seq.last_known_good_lsn)

    async def poke(self, log_id: int) -> None:
        """This node is the log's owner and holds overdue copies: make sure a
        sequencer runs here (see ``ReleaseWatch``)."""
        owner = self.node_id
        attributes = self.view.log_attributes(log_id)
        await self.execute(
            self.core.on_seq_state(log_id, (None, 0, log_id), owner=owner, attributes=attributes)
        )

    # -- activation and recovery ------------------------------------------------

    async def _recover(self, action: Recover) -> None:
        host = self.core
        log_id, core = action.log_id, action.core
        grace = self.options.recovery_grace_s
        if grace:
            _log.info("node %d: log %d: recovery in %.1fs", self.node_id, log_id, grace)
            await trio.sleep(grace)

        def failed(error: str) -> None:
            self.metrics.recovery_attempts_failed.inc()
            host.on_recovery_error(log_id, core, error)

        done = await self.procedures.recover(
            log_id,
            core.epoch,
            list(action.history),
            core.first_timestamp_ms,
            cancelled=lambda: not host.recovery_wanted(log_id, core),
            on_error=failed,
            sealed=core.sealed_producers,
        )
        now, now_ms = trio.current_time(), self.clock_ms()
        await self.execute(host.on_recovery_done(log_id, core, done is not None, done, now, now_ms))

    async def hand_off(self, timeout_s: float) -> tuple[int, int]:
        """The node stops (host rule 9): take no more appends, let those in
        flight finish, and end the epoch of every sequencer that can
        (``sequencer._handoff``), so that the next sequencer of each log
        recovers nothing.  At most ``timeout_s`` in all; what is left then is
        recovered as after a crash.  Returns (epochs ended, sequencers)."""
        deadline = trio.current_time() + timeout_s
        host = self.core
        host.closing = True
        count = host.sequencer_count()
        ended: list[bool] = []
        failed: list[str] = []
        store_timeout_s = self.options.store_timeout_s

        async def ender(cores: Iterator[SequencerCore]) -> None:
            for core in cores:  # shared by the enders: each takes the next
                try:
                    ended.append(await self.procedures.end_epoch(core, store_timeout_s))
                except LogstrandError as exc:  # left to the next sequencer's recovery
                    failed.append(f"log {core.log_id}: {exc}")

        # Appends in flight finish first, for at most half the time, while
        # they do finish: sequencers whose waves cannot complete (a copyset's
        # nodes gone) for HANDOFF_STUCK_S, like those held for a recovery
        # that is not done, are left to the next sequencer's recovery.
        busy_then, still = -1, 0.0
        for _ in range(int(timeout_s / 2 / HANDOFF_POLL_S)):
            busy = sum(1 for c in host.cores() if c.recovered and not c.preempted and not c.idle)
            if not busy or still >= HANDOFF_STUCK_S:
                break
            still = 0.0 if busy_then < 0 or busy < busy_then else still + HANDOFF_POLL_S
            busy_then = min(busy, busy_then) if busy_then >= 0 else busy
            await trio.sleep(HANDOFF_POLL_S)
        with trio.move_on_at(deadline):
            async with trio.open_nursery() as nursery:
                cores = iter(host.ending())
                for _ in range(HANDOFFS_IN_FLIGHT):
                    nursery.start_soon(ender, cores)
        if failed:
            _log.info(
                "node %d: %d epochs not ended (the next sequencers recover them); last: %s",
                self.node_id,
                len(failed),
                failed[-1],
            )
        return sum(ended), count

    # -- replies and timers -------------------------------------------------------

    async def release_flusher(self) -> None:
        """Send the RELEASEs gathered in a burst of work (see ``__init__``)."""
        while True:
            await self._release_wakeup.wait()
            self._release_wakeup = trio.Event()
            for _ in range(2):
                await trio.lowlevel.checkpoint()  # let the tasks that are ready now finish first
            await self.peers.after_bursts()
            pending, self._releases = self._releases, {}
            per_node: dict[int, list[tuple[int, int]]] = {}
            for log_id, (nodeset, lsn) in pending.items():
                for n in nodeset:
                    if self._release_sent.get((log_id, n), 0) < lsn:
                        per_node.setdefault(n, []).append((log_id, lsn))
            for n, releases in per_node.items():
                await self.peers.send_releases(n, releases)

    async def on_store_reply(self, reply: StoreReply) -> None:
        if _trace.ON:
            _trace.mark("seq.stored")
        await self.execute(self._stored(reply))

    def _stored(self, reply: StoreReply) -> list[HostAction]:
        if self.procedures.on_store_reply(reply):
            return []
        before = self.core.waves_retried
        actions = self.core.on_stored(
            reply.log_id, reply.store_id, reply.node_id, reply.status, trio.current_time()
        )
        self._count_retries(before)
        return actions

    def gauges(self) -> None:
        """Refresh the sequencer gauges (from the node's ticker, not per append)."""
        metrics = self.metrics
        metrics.sequencers.set(self.core.sequencer_count())
        metrics.recovery_stalled.set(len(self.core.stalled_logs(trio.current_time())))

    async def tick(self) -> None:
        before = self.core.waves_retried
        actions = self.core.tick(trio.current_time(), self.view.sequencer_node)
        self._count_retries(before)
        await self.execute(actions)

    def _count_retries(self, before: int) -> None:
        retried = self.core.waves_retried - before
        if retried:
            self.metrics.store_waves_retried.inc(retried)

    def on_membership(self, old: frozenset[int], new: frozenset[int]) -> None:
        """Tell the cores about nodes that died or came back (their waves move on at once)."""
        self.core.on_owners_changed()
        now = trio.current_time()
        for n in new - old:
            self.core.on_node_up(n)
        actions: list[HostAction] = []
        for n in old - new:
            actions += self.core.on_node_down(n, now)
        if actions:
            with contextlib.suppress(RuntimeError):  # the node is shutting down
                self.nursery.start_soon(self.execute, actions)

    # -- overdue releases ---------------------------------------------------------

    async def ask_for_release(self, log_id: int, watch: ReleaseWatch) -> None:
        """Copies of the log stay unreleased on this node: have its owner run a
        sequencer, and take what it has released (see ``ReleaseWatch``)."""
        owner = self.view.sequencer_node(log_id)
        if owner is None:
            return
        if owner == self.node_id:
            await self.poke(log_id)
            return
        reply = await self.peers.request(owner, lambda rid: GetSeqState(rid, log_id), 2.0)
        if not isinstance(reply, SeqState):
            return
        if reply.status == Status.OK:
            # A recovered sequencer runs: the release is late, not lost.
            watch.answered(log_id, reply.recovered)
            self.on_release(log_id, reply.released_lsn)
        elif reply.status == Status.NOTFOUND:
            watch.forget(log_id)

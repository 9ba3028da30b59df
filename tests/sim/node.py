"""A simulated storage node: the production request rules (``NodeStore``)
over a LogsDB on an in-memory engine, the production sequencer host core and
release watch, and the driver of the sequencer's procedures.  What is here
is the node's shell: it moves messages between them and the world."""

from __future__ import annotations

import functools
import itertools
import random
from typing import TYPE_CHECKING, Any, assert_never

import attrs

from logstrand import wire
from logstrand.epochstore import Placement
from logstrand.errors import LogstrandError, Status
from logstrand.logsdb import LogsDBOptions
from logstrand.placement import CopysetSelector, rendezvous_owner
from logstrand.sequencer import (
    ConfirmRefusal,
    ReplyAppend,
    SendRelease,
    SendStore,
    SequencerCore,
)
from logstrand.sequencer import _host as host_core
from logstrand.sequencer import _procedures as procs
from logstrand.sequencer._activation_queue import ActivationQueue
from logstrand.sequencer._commands import Finished, Gathering, advance
from logstrand.sequencer._decisions import RECOVERY_STORE_BIT
from logstrand.sequencer._handoff import end_epoch
from logstrand.storage._health_core import NodeClock
from logstrand.storage._metrics import NodeMetrics
from logstrand.storage._node_store import NodeStore
from logstrand.storage._release_watch import ReleaseWatch
from logstrand.testing import MemoryEngine, memory_logsdb

from .config import LOG, Address
from .tiering import PARTITION_MS

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

    from .world import World


class Endpoint:
    def __init__(self, world: World, endpoint_id: int) -> None:
        self.world = world
        self.id = endpoint_id
        self.up = True
        self.incarnation = 1
        self.paused_until = 0.0

    def receive(self, src: Address, msg: Any) -> None:
        raise NotImplementedError

    def send(self, dst: int | Address, msg: Any) -> None:
        self.world.send((self.id, self.incarnation), dst, msg)


class SimNode(Endpoint):
    """A storage node: LogsDB, the node's rules, and the production sequencer
    host core (``host_core.SequencerHostCore``), driven here instead of by trio."""

    def __init__(self, world: World, node_id: int) -> None:
        super().__init__(world, node_id)
        self.up = False
        self.engine = MemoryEngine()
        self.store: NodeStore | None = None
        self.incarnation = 0
        self.host = host_core.SequencerHostCore(node_id)
        self.activations = ActivationQueue(world.config.activations_in_flight)
        self.replies: dict[int, Callable[[Any], None]] = {}
        self.ids = itertools.count(1)
        self.watch = ReleaseWatch()
        #: This node's view of the membership (it lags the epoch store's).
        self.view: frozenset[int] = frozenset()
        self._view_version = -1
        #: Nodes a connection to failed lately: left out of routing (as
        #: ``ClusterView.suspect``), until the time given.
        self.suspects: dict[int, float] = {}
        #: Told to stop: ending its epochs (``stop``).
        self.stopping = False
        #: An offload round runs (``tiering.SimTier``), and the read it opened.
        self.tiering = False
        self.reading: Iterator[Any] | None = None

    @property
    def sequencer(self) -> SequencerCore | None:
        """The sequencer of the first log here (or of any log: the faults
        prefer nodes that run one)."""
        seq = self.host.sequencer(LOG)
        if seq is None and self.world.config.logs > 1:
            return next(iter(self.host.cores()), None)
        return seq

    # life

    def start(self) -> None:
        if self.up:
            return
        world = self.world
        self.up = True
        self.stopping = False
        self.incarnation += 1
        watch = self.watch = ReleaseWatch()
        clock = NodeClock(self.clock_ms, 5_000)
        clock.offset_ms = 0  # measured: retention by time may run
        store_class = (
            _AdmitAll
            if world.config.break_sealing
            else _NoCleanPoint
            if world.config.break_clean_point
            else NodeStore
        )
        store = self.store = store_class(
            self.id,
            _metrics(self.id),
            lambda log, lsn: watch.released(log, lsn, world.now),
            lambda log, last, release: watch.stored(log, last, release, world.now),
            clock,
        )
        options = LogsDBOptions(partition_duration_ms=PARTITION_MS) if world.tier else None
        store.attach(memory_logsdb(self.engine, options, clock_ms=world.clock_ms))
        for log, release in store.release.items():
            watch.stored(log, store.last_lsn(log), release, world.now)
        host_class = _RetireWhenIdle if world.config.break_retire else host_core.SequencerHostCore
        self.host = host_class(
            self.id, host_core.HostOptions(recovery_stall_s=world.config.recovery_stall_s)
        )
        self.activations = ActivationQueue(world.config.activations_in_flight)
        self.suspects.clear()
        world.note(f"node {self.id} starts (incarnation {self.incarnation})")
        world.join(self.id)
        # A node reads the membership when it starts.
        self.set_view(world.members, world.members_version)
        world.at(0.05, self._tick, self.incarnation)
        self.tiering, self.reading = False, None
        if world.tier is not None:
            world.tier.start(self)

    def crash(self) -> None:
        self.world.note(f"node {self.id} crashes")
        self.world.stats["crashes"] += 1
        self.up = False
        self.engine.crash()  # unsynced writes are gone
        self.store = None
        self.host = host_core.SequencerHostCore(self.id)
        self.replies.clear()
        self.paused_until = 0.0
        self.world.leave(self.id, self.incarnation)

    def stop(self) -> None:
        """SIGTERM: the node takes no more appends nor sequencers, ends the
        epoch of each sequencer that can (``sequencer._handoff``), and goes:
        its writes kept (a clean exit), its membership given up at once."""
        world, host, incarnation = self.world, self.host, self.incarnation
        world.note(f"node {self.id} stops")
        world.stats["stops"] += 1
        host.closing = self.stopping = True
        if world.config.break_handoff:  # ends also what has appends in flight
            self._hand_off(host, incarnation, 0.0)
        else:  # appends in flight finish first, for up to 0.5 s (as the node's shell)
            world.at(0.0, self._hand_off, host, incarnation, 0.5)

    def _hand_off(self, host: host_core.SequencerHostCore, incarnation: int, wait_s: float) -> None:
        world = self.world
        if not self.alive(incarnation) or host is not self.host:
            return
        busy = [c for c in host.cores() if c.recovered and not c.preempted and not c.idle]
        if busy and wait_s > 0:
            world.at(0.05, self._hand_off, host, incarnation, wait_s - 0.05)
            return
        if world.config.break_handoff:
            cores = [c for c in host.cores() if c.recovered and not c.preempted]
        else:
            cores = host.ending()
        left = [len(cores)]

        def gone() -> None:
            if self.alive(incarnation):
                world.note(f"node {self.id} gone ({left[0]} epochs not ended)")
                self.up = False
                self.store = None
                self.host = host_core.SequencerHostCore(self.id)
                self.replies.clear()
                world.left(self.id)
                world.at(world.rng.uniform(0.1, 2.0), self.start)

        def ended(value: Any, error: BaseException | None) -> None:
            if value:
                world.stats["epochs_ended"] += 1
            left[0] -= 1
            if not left[0]:
                gone()

        for core in cores:
            self.run(end_epoch(core, self.reachable, 0.3), ended)
        if not cores:
            gone()
        else:
            world.at(1.0, gone)  # the hand-off's bound

    def pause(self, seconds: float) -> None:
        self.world.note(f"node {self.id} paused for {seconds:.3f}s")
        self.world.stats["pauses"] += 1
        self.paused_until = self.world.now + seconds
        self.world.check_service()
        self.world.at(seconds, self.world.check_service)

    def released(self, log_id: int) -> int:
        """The node's release pointer of ``log_id`` (0 while it is down)."""
        return self.store.release_of(log_id) if self.store is not None else 0

    def alive(self, incarnation: int) -> bool:
        return self.up and self.incarnation == incarnation

    def set_view(self, members: frozenset[int], version: int) -> None:
        """The membership watch fired (late, and maybe out of order: keep the newest)."""
        if not self.up or version <= self._view_version:
            return
        old, self.view, self._view_version = self.view, members, version
        now = self.world.now
        for n in members - old:
            self.suspects.pop(n, None)
            self.host.on_node_up(n)
        actions: list[Any] = []
        for n in old - members:
            actions += self.host.on_node_down(n, now)
        self._execute(actions)

    def reachable(self) -> set[int]:
        """Members not suspected: whom routing and recovery use."""
        now = self.world.now
        return {n for n in self.view if self.suspects.get(n, 0.0) <= now}

    def owner(self, log: int = LOG) -> int | None:
        me = set() if self.stopping else {self.id}  # a stopping node says it takes none
        return rendezvous_owner(log, dict.fromkeys(sorted(self.reachable() | me), 1.0))

    def renew(self, logs: list[int]) -> None:
        """A ``Renew`` of these logs reached this node (``logs rebalance``)."""
        if self.paused_until > self.world.now:
            return
        for log in logs:
            epoch, actions = self.host.on_renew(log)
            if epoch:
                self.world.stats["renewed"] += 1
            self._execute(actions)

    def _tick(self, incarnation: int) -> None:
        if not self.alive(incarnation):
            return
        now = self.world.now
        if self.paused_until <= now:
            self._execute(self.host.tick(now, self.owner))
            for log in self.watch.due(now):
                if not self.world.config.break_release_watch:
                    self._ask_for_release(log)
        self.world.at(0.05, self._tick, incarnation)

    def _ask_for_release(self, log: int) -> None:
        """Copies stay unreleased here: have the owner run a sequencer (``ReleaseWatch``)."""
        owner = self.owner(log)
        if owner is None:
            return
        rid = next(self.ids)
        watch = self.watch

        def on_reply(reply: wire.SeqState) -> None:
            self.replies.pop(rid, None)
            if reply.status == Status.OK and self.store is not None:
                watch.answered(log, reply.recovered)
                self.store.on_release(log, reply.released_lsn)

        self.replies[rid] = on_reply
        self.send(owner, wire.GetSeqState(rid, log))

    def send(self, dst: int | Address, msg: Any) -> None:
        world = self.world
        to = dst if isinstance(dst, int) else dst[0]
        if to in world.nodes and not world.nodes[to].up and to != self.id:
            # Connection refused: the sender finds out at once and suspects
            # it, and a STORE fails at once (the node's shell answers for it).
            self.suspects[to] = world.now + 2.0
            if isinstance(msg, wire.Store):
                fail = wire.StoreReply(msg.store_id, msg.log_id, int(Status.CONNFAILED), to)
                world.at(0.0, self._deliver_local, self.incarnation, fail)
                return
        super().send(dst, msg)

    def _deliver_local(self, incarnation: int, msg: Any) -> None:
        if self.alive(incarnation):
            self.world._deliver((self.id, incarnation), (self.id, incarnation), msg)

    # messages

    def receive(self, src: Address, msg: Any) -> None:
        store = self.store
        assert store is not None
        if isinstance(msg, wire.Store):
            [reply] = store.commit([msg])
            self.send(src, reply)
        elif isinstance(msg, wire.Release):
            store.on_release(msg.log_id, msg.lsn)
        elif isinstance(msg, wire.Seal | wire.GetDigest | wire.LogInfo):
            self.send(src, store.answer(msg))
        elif isinstance(msg, wire.Append):
            self._append(src, msg)
        elif isinstance(msg, wire.StoreReply):
            if msg.store_id & RECOVERY_STORE_BIT:
                self._reply_to(msg.store_id, msg)
            else:
                now = self.world.now
                self._execute(
                    self.host.on_stored(msg.log_id, msg.store_id, msg.node_id, msg.status, now)
                )
        elif isinstance(msg, wire.GetSeqState):
            self._execute(
                self.host.on_seq_state(
                    msg.log_id,
                    (src, msg.request_id, msg.log_id),
                    owner=self.owner(msg.log_id),
                    attributes=self.world.attributes,
                )
            )
        elif isinstance(msg, wire.LogInfoReply | wire.SealReply | wire.Digest | wire.SeqState):
            self._reply_to(msg.request_id, msg)

    def _reply_to(self, request_id: int, msg: Any) -> None:
        handler = self.replies.get(request_id)
        if handler is not None:
            handler(msg)

    # sequencer host: the production core decides, this performs

    def clock_ms(self) -> int:
        """This node's wall clock: the world's, skewed by -1, 0 or +1 times
        ``clock_skew_ms`` by node id."""
        config = self.world.config
        skew = config.clock_skew_ms or (3_600_000 if config.break_timestamps else 0)
        return self.world.clock_ms() + (self.id % 3 - 1) * skew

    def _append(self, src: Address, msg: wire.Append) -> None:
        world = self.world
        actions = self.host.on_append(
            msg.log_id,
            msg.batch,
            (src, msg.request_id),
            world.now,
            self.clock_ms(),
            owner=self.owner(msg.log_id),
            attributes=world.attributes,
        )
        self._execute(actions)

    def _activate(self, log: int) -> None:
        """Start the log's activation, or queue it behind the bound."""
        for start in self.activations.add(log):
            self._activate_now(start)
        stats = self.world.stats
        stats["queued"] = max(stats["queued"], self.activations.waiting)

    def _activate_now(self, log: int) -> None:
        world = self.world
        nodeset = tuple(sorted(world.nodes))
        placement = Placement(nodeset, world.config.replication)
        host, queue = self.host, self.activations

        def activated(result: Any, error: BaseException | None) -> None:
            if host is not self.host:
                return  # the node restarted meanwhile
            following = queue.finished()
            if following is not None:
                self._activate_now(following)
            where = "" if world.config.logs == 1 else f" log {log}"
            if error is not None:
                world.note(f"node {self.id}{where} activation failed: {error}")
                assert isinstance(error, LogstrandError)
                self._execute(host.on_activation_failed(log, error.status, str(error)))
                return
            epoch, meta, history, start_ms, sealed = result
            world.stats["activations"] += 1
            world.note(f"node {self.id}{where} sequencer active in epoch {epoch}")
            selector = CopysetSelector(
                meta.nodeset, meta.replication_factor, rng=random.Random(world.rng.random())
            )
            core = SequencerCore(
                log,
                epoch,
                selector,
                sync=True,
                recovered=epoch == 1,
                # Production's ratios, scaled down: 2 s doubling up to 10 s.
                store_timeout_s=0.3,
                store_timeout_max_s=1.5,
                retry_wait_s=0.1,
                ids=None if world.config.break_store_ids else self.ids,
                esn_max=world.config.esn_max,
                last_timestamp_ms=self.clock_ms() if world.config.break_timestamps else start_ms,
                sealed_producers=sealed,
            )
            if world.config.break_release:
                core.recovered = True
            core.down.update(n for n in meta.nodeset if n not in self.view)
            self.run(procs.rebroadcast_release(log, meta.nodeset, 0.5), lambda *_: None)
            self._execute(host.on_activated(log, core, world.now, self.clock_ms(), tuple(history)))

        self.run(procs.activate(log, placement, 0.5, self.clock_ms), activated)

    def _recover(self, log: int, core: SequencerCore, history: list[Any]) -> None:
        world = self.world
        host = self.host
        world.crash_during_recovery(self)
        self.run(
            procs.recover(
                log,
                core.epoch,
                history,
                lambda m: CopysetSelector(
                    m.nodeset, m.replication_factor, rng=random.Random(world.rng.random())
                ),
                self.reachable,
                core.first_timestamp_ms,
                ask_timeout_s=0.5,
                digest_timeout_s=0.5,
                store_timeout_s=0.5,
                settle_s=0.05,
                cancelled=lambda: not host.recovery_wanted(log, core),
                on_error=lambda error: host.on_recovery_error(log, core, error),
                sealed=core.sealed_producers,
            ),
            lambda done, err: self._recovered(host, log, core, done, err),
        )

    def _recovered(
        self,
        host: host_core.SequencerHostCore,
        log: int,
        core: SequencerCore,
        done: Any,
        error: Any,
    ) -> None:
        if error is not None:
            raise error
        if host is not self.host:
            return
        world = self.world
        if done is not None:
            where = "" if world.config.logs == 1 else f" log {log}"
            world.note(f"node {self.id}{where} recovered before epoch {core.epoch}")
        self._execute(
            host.on_recovery_done(log, core, done is not None, done, world.now, self.clock_ms())
        )

    def _execute(self, actions: list[host_core.HostAction]) -> None:
        for a in actions:
            # The node's interpreter (storage/_sequencers.execute) takes the
            # same closed union: mypy names a case either one lacks.
            match a:
                case SendStore():
                    self.send(a.node_id, a.message)
                case ReplyAppend():
                    src, rid = a.token
                    self.send(
                        src,
                        wire.AppendReply(
                            rid, int(a.status), a.first_lsn, a.count, a.timestamp_ms, a.redirect
                        ),
                    )
                case SendRelease():
                    for n in a.nodeset:
                        self.send(n, wire.Release(a.log_id, a.lsn))
                case host_core.Activate():
                    self._activate(a.log_id)
                case host_core.Recover():
                    self._recover(a.log_id, a.core, list(a.history))
                case host_core.ReplySeqState():
                    src, rid, log = a.token
                    assert self.store is not None
                    release = self.store.release_of(log)
                    self.send(src, self.host.seq_state(a, rid, release, self.world.now))
                case ConfirmRefusal():
                    self._confirm_refusal(a)
                case host_core.RecoveryStalled():
                    note = f"node {self.id} recovery stalled in epoch {a.epoch}: {a.error}"
                    self.world.note(note)
                    self.world.stats["stalls"] += 1
                case _:
                    assert_never(a)

    def _confirm_refusal(self, action: ConfirmRefusal) -> None:
        """Read the log's next epoch (a little later, as from a store) and
        let the host decide whether the refusal stands."""
        incarnation, host = self.incarnation, self.host

        def checked() -> None:
            if not self.alive(incarnation) or host is not self.host:
                return
            next_epoch = self.world.estore.log_epochs(action.log_id).next_epoch
            self._execute(
                host.on_refusal_checked(action, next_epoch, self.world.now, self.clock_ms())
            )

        self.world.at(self.world.rng.uniform(0.001, 0.01), checked)

    # the procedures' driver

    def run(
        self, proc: Generator[Any, Any, Any], done: Callable[[Any, BaseException | None], None]
    ) -> None:
        self._step(proc, self.incarnation, None, None, done)

    def _step(
        self,
        proc: Generator[Any, Any, Any],
        incarnation: int,
        value: Any,
        error: BaseException | None,
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        world = self.world
        if not self.alive(incarnation):
            proc.close()  # the node died: so did everything it was doing
            return
        if self.paused_until > world.now:
            world.at(
                self.paused_until - world.now, self._step, proc, incarnation, value, error, done
            )
            return
        cmd = advance(proc, value, error)
        if isinstance(cmd, Finished):
            done(cmd.value, cmd.error)
            return

        def resume(value: Any = None, error: BaseException | None = None) -> None:
            self._step(proc, incarnation, value, error, done)

        if world.tier is not None and world.tier.perform(self, cmd, resume):
            return  # one of tiered storage's commands (``tiering``)

        # The same closed union as the node's shell (storage/_procedures.py).
        match cmd:
            case procs.Ask():
                self._ask(cmd, resume)
            case procs.Tell():
                self.send(cmd.node_id, cmd.message)
                world.at(0.0, resume)
            case procs.StoreCopies():
                self._store_copies(cmd, resume)
            case procs.EpochStoreCall():
                try:
                    result = cmd.fn(world.estore)
                except LogstrandError as exc:
                    world.at(world.rng.uniform(0.001, 0.01), resume, None, exc)
                else:
                    world.at(world.rng.uniform(0.001, 0.01), resume, result)
            case procs.Sleep():
                world.at(cmd.seconds, resume)
            case _:
                assert_never(cmd)

    def _ask(self, cmd: procs.Ask, resume: Callable[..., None]) -> None:
        gathering = Gathering(cmd, self.world.now)
        ids: list[int] = []
        finish = self._finisher(gathering, ids, resume)
        for node_id, msg in cmd.requests:
            rid = next(self.ids)
            ids.append(rid)
            self.replies[rid] = functools.partial(self._gathered, gathering, node_id, finish)
            self.send(node_id, attrs.evolve(msg, request_id=rid))
        self.world.at(cmd.timeout_s, finish)

    def _store_copies(self, cmd: procs.StoreCopies, resume: Callable[..., None]) -> None:
        store_id = RECOVERY_STORE_BIT | next(self.ids)
        msg = attrs.evolve(cmd.message, store_id=store_id)
        gathering = Gathering(cmd, self.world.now)
        finish = self._finisher(gathering, [store_id], resume)

        def on_reply(reply: wire.StoreReply) -> None:
            self._gathered(gathering, reply.node_id, finish, reply.status)

        self.replies[store_id] = on_reply
        for n in msg.copyset:
            self.send(n, msg)
        self.world.at(cmd.timeout_s, finish)

    def _finisher(
        self, gathering: Gathering, ids: list[int], resume: Callable[..., None]
    ) -> Callable[[], None]:
        """Resume the procedure once, with what was gathered, at the first of:
        every reply, the settle time after enough, the timeout."""
        finished = False

        def finish() -> None:
            nonlocal finished
            if not finished:
                finished = True
                for rid in ids:
                    self.replies.pop(rid, None)
                resume(dict(gathering.replies))

        return finish

    def _gathered(
        self, gathering: Gathering, node_id: int, finish: Callable[[], None], reply: Any
    ) -> None:
        deadline = gathering.deadline
        if gathering.add(node_id, reply, self.world.now):
            finish()
        elif gathering.deadline < deadline:
            self.world.at(gathering.deadline - self.world.now, finish)


class _RetireWhenIdle(host_core.SequencerHostCore):
    """``break_retire``: the rule before the failover-stall fix.  An idle
    sequencer retired as soon as the log's owner moved, recovered or not, and
    its recovery stopped with it."""

    def _retirable(self, core: SequencerCore, owner: Callable[[], int | None]) -> bool:
        return core.idle and (core.preempted or owner() != self.node_id)


class _AdmitAll(NodeStore):
    """``break_sealing``: a node that takes STOREs into sealed epochs."""

    def admit(self, msg: wire.Store) -> bool:
        return True


class _NoCleanPoint(NodeStore):
    """``break_clean_point``: a node that drops copies but never moves its
    clean point, so readers cannot tell what compaction removed from loss."""

    def set_clean_point(self, log_id: int, lsn: int) -> None:
        pass


_METRICS: dict[int, NodeMetrics] = {}


def _metrics(node_id: int) -> NodeMetrics:
    """One registry per node id for the whole process (counted, not read)."""
    if node_id not in _METRICS:
        _METRICS[node_id] = NodeMetrics(node_id)
    return _METRICS[node_id]

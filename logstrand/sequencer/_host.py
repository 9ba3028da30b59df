"""The sequencers one node runs: routing, activation, recovery, retirement.  Pure: no trio.

Theory of operation
-------------------
A node runs the sequencer of every log it owns (rendezvous hashing over the
live sequencer nodes; the caller computes the owner from its view of the
cluster and passes it in).  ``SequencerHostCore`` takes the APPENDs that
reach the node and decides, per log:

* this node is not the owner: REDIRECTED to it (NOSEQUENCER when none);
* the log does not exist: NOTFOUND; records the log cannot take: their
  error, before any STORE;
* no sequencer (or only one a newer epoch sealed): the append waits in a
  bounded queue and the driver is asked to ``Activate`` the log.  When the
  driver reports the new core (``on_activated``), the waiting appends go to
  it, and ``Recover`` is asked for when earlier epochs exist;
* otherwise the log's ``SequencerCore`` takes the append.

The driver (the node's trio shell, or the seeded simulation) performs the
actions: STOREs, replies, RELEASEs, activations and recoveries, and reports
their outcomes back.  Both run these rules, so the simulation checks them.

Rules:

1. One activation per log at a time.  Appends that arrive meanwhile wait, at
   most ``waiting_appends_max`` of them (OVERLOADED past that), and get the
   activation's error if it fails.
2. A sequencer whose earlier epochs are not yet recovered keeps recovering
   until it is done or a newer sequencer overtakes it, and it is never
   retired before: what it acknowledged becomes readable only through its own
   release.  (Retiring one because the log's owner had moved left
   acknowledged records unreadable until another node activated the log.)
3. A recovery overtaken by a newer sequencer preempts the core: its pending
   appends fail with PREEMPTED (the newer sequencer recovers whatever they
   stored), and it takes no more.
4. A recovery not finished ``recovery_stall_s`` after activation makes the log
   *stalled*: the host says so once (``RecoveryStalled``, which the driver
   logs loudly and counts), and refuses appends with NOTREADY and the last
   recovery error, rather than acknowledge records it cannot release.  The
   recovery goes on; when it finishes, appends are taken again.
5. A sequencer is retired when a newer one sealed it and nothing is in
   flight, or when the log moved to another owner and everything it
   acknowledged is released.
6. An epoch out of ESNs (2^32 − 1 records, or ``esn_max``) takes no more
   appends: they wait, and once its appends in flight are done the log is
   activated again, in a new epoch (whose recovery ends the old one with a
   bridge).  Readers see one BRIDGE gap; appends never fail for it.
7. A tick costs what is pending, not what is configured: it looks only at
   the logs that need it (the *attention* set), which a log enters with every
   event about it and every membership change, and leaves once nothing of
   it can change with time alone.  A membership change puts every log in a
   *sweep* that ticks take ``sweep_per_tick`` at a time (100,000 sequencers
   looked at in one tick stopped the loop for seconds).  A log whose only
   pending change is a wave's deadline waits in a timer queue
   (``_timers.DeadlineQueue``) instead.  With no log needing attention the
   shell need not tick until the first deadline (``next_tick_at``); the
   host calls ``wake`` as soon as one does again.
8. A renewal (``on_renew``, from ``logs rebalance``) treats the log's
   sequencer as out of ESNs (rule 6) and activates the log again as soon as
   its appends in flight are done, with or without appends waiting: the new
   epoch chooses its nodeset among the storage nodes there are now.
9. A node that stops is *closing*: it retires no sequencer and takes no
   append (NOTREADY while it still owns the log), and its shell ends the
   epoch of each one ``ending()`` names (``_handoff``) for the next one.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ..errors import Status
from ._core import Action, ConfirmRefusal, ReplyAppend, SequencerCore
from ._host_actions import (
    Activate,
    HostAction,
    HostOptions,
    Recover,
    RecoveryStalled,
    ReplySeqState,
    SequencerState,
    Slot,
    check_records,
)
from ._host_queries import HostQueries
from ._timers import DeadlineQueue, parkable

__all__ = [
    "Activate",
    "HostAction",
    "HostOptions",
    "Recover",
    "RecoveryStalled",
    "ReplySeqState",
    "SequencerHostCore",
    "SequencerState",
    "check_records",
]

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..batch import PackedBatch
    from ..epochstore._model import EpochMetadata, LogAttributes
    from ..idempotence import Producers


class SequencerHostCore(HostQueries):
    """The sequencers of one node (see the module docstring)."""

    def __init__(self, node_id: int, options: HostOptions | None = None) -> None:
        self.node_id = node_id
        self.options = options or HostOptions()
        self._slots: dict[int, Slot] = {}
        #: The logs a tick looks at (rule 7).
        self._attention: set[int] = set()
        #: Logs waiting for a wave's deadline (rule 7).
        self._timers = DeadlineQueue()
        #: Logs a membership change wants looked at, a tick's share at a time.
        self._sweep: deque[int] = deque()
        #: Store waves started again, over every core this host ran.
        self.waves_retried = 0
        self.closing = False  # rule 9
        #: The shell's: a tick has work again after none (``next_tick_at``).
        self.wake: Callable[[], object] = lambda: None

    def _attend(self, log_id: int) -> None:
        if not self._attention:
            self.wake()
        self._attention.add(log_id)

    def next_tick_at(self) -> float:
        """Rule 7: when a tick next has work: 0 (every tick) while logs need
        attention or a sweep runs, else the first parked deadline (inf:
        none).  ``wake`` is called when it becomes 0 again."""
        if self._attention or self._sweep:
            return 0.0
        return self._timers.next_deadline()

    # -- input from clients ---------------------------------------------------

    def on_append(
        self,
        log_id: int,
        batch: PackedBatch,
        token: Any,
        now: float,
        now_ms: int,
        *,
        owner: int | None,
        attributes: LogAttributes | None,
    ) -> list[HostAction]:
        refusal = self._route(log_id, token, owner, attributes)
        if refusal is not None:
            return [refusal]
        assert attributes is not None
        problem = check_records(batch, attributes, self.options)
        if problem is not None:
            return [ReplyAppend(token, problem[0], message=f"log {log_id}: {problem[1]}")]
        self._attend(log_id)
        slot = self._slots.setdefault(log_id, Slot())
        core = slot.core
        if core is not None and not core.preempted:
            if slot.stalled(now, self.options.recovery_stall_s):
                return [ReplyAppend(token, Status.NOTREADY, message=slot.stall_text(now))]
            if core.room_for(len(batch)):
                return self._appended(core, core.append(batch, token, now, now_ms))
            if len(batch) > core.esn_max:  # no epoch could take it (a lowered esn_max)
                return [ReplyAppend(token, Status.TOOBIG, message="more records than an epoch")]
            core.exhausted = True  # rule 6
        return self._wait_for_activation(log_id, slot, batch, token)

    def on_seq_state(
        self,
        log_id: int,
        token: Any,
        *,
        owner: int | None,
        attributes: LogAttributes | None,
    ) -> list[HostAction]:
        """GET_SEQ_STATE: activate the log's sequencer here if this node owns it."""
        refusal = self._route(log_id, token, owner, attributes)
        if refusal is not None:
            assert isinstance(refusal, ReplyAppend)
            return [ReplySeqState(token, refusal.status, refusal.message)]
        self._attend(log_id)
        slot = self._slots.setdefault(log_id, Slot())
        if slot.core is not None and not slot.core.preempted:
            return [ReplySeqState(token, Status.OK)]
        return self._wait_for_activation(log_id, slot, None, token)

    def _route(
        self, log_id: int, token: Any, owner: int | None, attributes: LogAttributes | None
    ) -> HostAction | None:
        if owner != self.node_id:
            if owner is None:
                return ReplyAppend(token, Status.NOSEQUENCER, message="no sequencer node is alive")
            return ReplyAppend(
                token, Status.REDIRECTED, message="sequencer elsewhere", redirect=owner
            )
        if self.closing:
            return ReplyAppend(token, Status.NOTREADY, message="the node is shutting down")
        if attributes is None:
            return ReplyAppend(token, Status.NOTFOUND, message=f"log {log_id} does not exist")
        return None

    def _wait_for_activation(
        self, log_id: int, slot: Slot, batch: PackedBatch | None, token: Any
    ) -> list[HostAction]:
        if len(slot.waiting) >= self.options.waiting_appends_max:
            status, text = Status.OVERLOADED, "too many appends wait for the sequencer"
            if batch is None:
                return [ReplySeqState(token, status, text)]
            return [ReplyAppend(token, status, message=text)]
        slot.waiting.append((batch, token))
        return self._activate_if_due(log_id, slot)

    def _activate_if_due(self, log_id: int, slot: Slot) -> list[HostAction]:
        """Ask for one activation while appends wait, unless one runs or an
        exhausted epoch still has appends in flight (rule 6)."""
        if slot.activating or not (slot.waiting or slot.renew):
            return []
        core = slot.core
        if core is not None and core.exhausted and not core.preempted and not core.idle:
            return []
        slot.activating = True
        return [Activate(log_id)]

    # -- activation -----------------------------------------------------------

    def on_activated(
        self,
        log_id: int,
        core: SequencerCore,
        now: float,
        now_ms: int,
        history: tuple[EpochMetadata, ...] = (),
    ) -> list[HostAction]:
        """The driver activated ``core`` (epoch taken, earlier epochs sealed;
        ``history``: the log's placements, which its recovery reads)."""
        self._attend(log_id)
        slot = self._slots.setdefault(log_id, Slot())
        assert slot.core is None or slot.core.epoch < core.epoch, "epochs only increase"
        slot.activating = False
        slot.renew = False
        slot.core = core
        slot.activated_at = now
        slot.attempts_failed = 0
        slot.error = ""
        slot.stall_reported = False
        actions: list[HostAction] = []
        if not core.recovered:
            actions.append(Recover(log_id, core, history))
        waiting, slot.waiting = slot.waiting, []
        for batch, token in waiting:
            if batch is None:
                actions.append(ReplySeqState(token, Status.OK))
            else:
                actions += self._appended(core, core.append(batch, token, now, now_ms))
        return actions

    def on_activation_failed(self, log_id: int, status: Status, message: str) -> list[HostAction]:
        slot = self._slots.get(log_id)
        if slot is None:
            return []
        slot.activating = False
        slot.renew = False
        waiting, slot.waiting = slot.waiting, []
        text = f"cannot activate a sequencer for log {log_id}: {message}"
        if slot.core is None:
            del self._slots[log_id]
        return [
            ReplySeqState(token, status, text)
            if batch is None
            else ReplyAppend(token, status, message=text)
            for batch, token in waiting
        ]

    def on_refusal_checked(
        self, action: ConfirmRefusal, next_epoch: int, now: float = 0.0, now_ms: int = 0
    ) -> list[HostAction]:
        """The shell read the log's next epoch for a ``ConfirmRefusal``: with no
        later epoch handed out the refusal stands; else this core steps down
        and the batch waits for a new epoch's sequencer (its recovery brings
        every producer's batches), or goes to a newer core already here."""
        self._attend(action.log_id)
        slot = self._slots.get(action.log_id)
        if slot is None:
            return [ReplyAppend(action.reply.token, Status.PREEMPTED, message="retry")]
        core, token = slot.core, action.reply.token
        actions: list[HostAction] = []
        if core is not None and not core.preempted:
            if core.epoch != action.epoch:
                return self._appended(core, core.append(action.batch, token, now, now_ms))
            if next_epoch <= action.epoch + 1:
                return [action.reply]
            actions += core.preempt()
        return actions + self._wait_for_activation(action.log_id, slot, action.batch, token)

    def on_renew(self, log_id: int) -> tuple[int, list[HostAction]]:
        """Rule 8: move the log's sequencer here to a new epoch.  Returns
        its epoch (0: none runs here, nothing done) and the actions."""
        slot = self._slots.get(log_id)
        core = slot.core if slot is not None else None
        if slot is None or core is None or core.preempted:
            return 0, []
        if not slot.activating:
            core.exhausted = True
            slot.renew = True
            self._attend(log_id)
        return core.epoch, self._activate_if_due(log_id, slot)

    # -- recovery -------------------------------------------------------------

    def recovery_wanted(self, log_id: int, core: SequencerCore) -> bool:
        """Whether the recovery started for ``core`` should go on."""
        slot = self._slots.get(log_id)
        return slot is not None and slot.core is core and not core.preempted

    def on_recovery_error(self, log_id: int, core: SequencerCore, error: str) -> None:
        slot = self._slots.get(log_id)
        if slot is not None and slot.core is core:
            slot.attempts_failed += 1
            slot.error = error

    def on_recovery_done(
        self,
        log_id: int,
        core: SequencerCore,
        recovered: bool,
        producers: Producers | None = None,
        now: float = 0.0,
        now_ms: int = 0,
    ) -> list[HostAction]:
        """The recovery ended: every earlier epoch is clean (``recovered``,
        with the idempotent ``producers`` they hold), or a newer sequencer
        overtook it."""
        self._attend(log_id)
        slot = self._slots.get(log_id)
        if slot is None or slot.core is not core:
            return []
        if recovered and not core.preempted:
            slot.error = ""
            return list(core.set_recovered(producers, now, now_ms))
        actions: list[HostAction] = list(core.preempt())
        if core.idle and not slot.activating and not slot.waiting:
            # (An activation under way keeps the slot: it reports to it.)
            del self._slots[log_id]
        return actions

    # -- storage replies, timers, membership ----------------------------------

    def on_stored(
        self, log_id: int, store_id: int, node_id: int, status: int, now: float
    ) -> list[HostAction]:
        slot = self._slots.get(log_id)
        core = slot.core if slot is not None else None
        if core is None:
            return []
        self._attend(log_id)
        actions = self._appended(core, core.on_stored(store_id, node_id, status, now))
        assert slot is not None
        if core.preempted and core.idle and not slot.waiting and not slot.activating:
            del self._slots[log_id]
        elif core.exhausted:
            actions += self._activate_if_due(log_id, slot)
        return actions

    def tick(self, now: float, owner_of: Callable[[int], int | None]) -> list[HostAction]:
        """Store timeouts, stalled recoveries, retirement: of the logs that
        need attention (rule 7)."""
        actions: list[HostAction] = []
        self._attention.update(self._timers.due(now))
        sweep, slots = self._sweep, self._slots
        for _ in range(min(len(sweep), self.options.sweep_per_tick)):
            log_id = sweep.popleft()
            if log_id in slots:
                self._attention.add(log_id)
        for log_id in list(self._attention):
            slot = self._slots.get(log_id)
            if slot is None:
                self._attention.discard(log_id)
                continue
            actions += self._tick_one(log_id, slot, now, owner_of)
        return actions

    def _tick_one(
        self, log_id: int, slot: Slot, now: float, owner_of: Callable[[int], int | None]
    ) -> list[HostAction]:
        actions: list[HostAction] = []
        core = slot.core
        if core is None:
            if not slot.activating and not slot.waiting:
                del self._slots[log_id]
                self._attention.discard(log_id)
            return actions
        deadline = core.next_deadline()
        if deadline is not None and deadline <= now:
            actions += self._appended(core, core.tick(now))
        if core.exhausted:
            actions += self._activate_if_due(log_id, slot)
        if slot.stalled(now, self.options.recovery_stall_s) and not slot.stall_reported:
            slot.stall_reported = True
            actions.append(
                RecoveryStalled(
                    log_id,
                    core.epoch,
                    now - slot.activated_at,
                    slot.attempts_failed,
                    slot.error,
                )
            )
        owner = _Once(owner_of, log_id)  # one look per tick
        if not slot.activating and self._retirable(core, owner):
            del self._slots[log_id]
            self._attention.discard(log_id)
        elif self._settled(slot, core, owner):
            self._attention.discard(log_id)
        elif (deadline := parkable(core, slot.activating or bool(slot.waiting))) is not None:
            self._attention.discard(log_id)
            self._timers.park(log_id, deadline)
            return actions
        self._timers.forget(log_id)  # looked at now: an older entry is stale
        return actions

    def _settled(self, slot: Slot, core: SequencerCore, owner: Callable[[], int | None]) -> bool:
        """Rule 7: nothing of this log changes with time alone."""
        if slot.activating or slot.waiting or core.exhausted:
            return False
        if core.next_deadline() is not None or not core.recovered or core.preempted:
            return False
        if core.released_lsn < core.last_known_good_lsn:
            return False
        return not core.idle or owner() == self.node_id

    def on_owners_changed(self) -> None:
        """The membership changed, so a log's owner may have: every log gets
        one look (its retirement), ``sweep_per_tick`` logs a tick (rule 7).
        A change during a sweep starts it again."""
        self._sweep = deque(self._slots)
        self.wake()

    def on_node_down(self, node_id: int, now: float) -> list[HostAction]:
        actions: list[HostAction] = []
        for core in self.cores():
            actions += self._appended(core, core.on_node_down(node_id, now))
        return actions

    def on_no_writes(self, nodes: frozenset[int]) -> None:
        """Nodes being rebuilt or drained: no new copysets name them."""
        for core in self.cores():
            core.no_writes = nodes

    def on_node_up(self, node_id: int) -> None:
        for core in self.cores():
            core.on_node_up(node_id)

    # -- internals --------------------------------------------------------------

    def _appended(self, core: SequencerCore, actions: list[Action]) -> list[HostAction]:
        self.waves_retried += core.take_waves_retried()
        return list(actions)

    def _retirable(self, core: SequencerCore, owner: Callable[[], int | None]) -> bool:
        if not core.idle:
            return False
        if core.preempted:
            return True
        # Rule 2: never before everything it acknowledged is released.
        done = core.recovered and core.released_lsn >= core.last_known_good_lsn
        return done and not self.closing and owner() != self.node_id


class _Once:
    """``owner_of(log_id)``, looked up at most once, when first asked.
    (``functools.cache`` over a partial did the same at several times the
    cost, and a tick makes one per log it looks at.)"""

    __slots__ = ("_fn", "_got", "_log_id", "_value")

    def __init__(self, fn: Callable[[int], int | None], log_id: int) -> None:
        self._fn = fn
        self._log_id = log_id
        self._got = False
        self._value: int | None = None

    def __call__(self) -> int | None:
        if not self._got:
            self._value = self._fn(self._log_id)
            self._got = True
        return self._value

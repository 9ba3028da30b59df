"""The sequencer of one log in one epoch: a pure state machine.

Theory of operation
-------------------
``append`` gives a batch consecutive ESNs and makes it an *appender*: the
batch, its current copyset and wave, and the nodes that acknowledged it.
Each wave sends one STORE (the whole batch, one copyset) to R nodes picked by
the ``CopysetSelector``.  When all R acknowledge, the client is answered.  A
node that refuses, fails or stays silent past the store timeout is excluded
for that appender, and a new wave goes to a fresh copyset.

The window holds the appenders in ESN order.  The *last known good* ESN
(LNG) is the end of the longest prefix of fully stored appenders; when it
moves, and once recovery of earlier epochs is done, the release pointer
follows and RELEASE goes to the nodeset.  A full window (appenders or bytes)
refuses new appends with OVERLOADED instead of queueing without bound.

Rules:

1. ESNs are handed out in order and never twice.
2. The client is answered OK only after R distinct nodes of one wave stored
   the batch.
3. Nothing is released above an ESN whose appender is not fully stored.
4. Nothing of this epoch is released before ``recovered``.
5. A STORE refused with PREEMPTED means a newer sequencer sealed the epoch:
   every pending append fails with PREEMPTED and the core stops.
6. Idempotent appends (a batch with a producer column) are judged against
   the log's ``Producers`` table (``logstrand.idempotence``): a retried batch
   is answered with the LSNs it got (at once, or when its appender
   completes if it is still in flight), never stored twice.  Until the table
   is known (``set_recovered`` brings it, from the earlier epochs) they wait
   in the core, at most ``appenders_max`` of them.  A batch ahead of the
   table, or of a producer the table does not know, is refused only once
   the shell has checked that no newer epoch exists (``ConfirmRefusal``):
   a sequencer that a newer one sealed, without having heard of it yet,
   must not refuse what the newer one's table would take.  A Kafka
   producer's batch below its fence is FENCED at once: any newer table
   holds the fence too.

The shell feeds it messages and ``now`` (seconds) and performs the actions it
returns; ``next_deadline()`` says when to call ``tick``.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import Status
from ..idempotence import EXPIRY_MS, Producers, Sent, Verdict
from ..records import ESN_MAX
from ..types import compose_lsn
from ..wire import Store

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..batch import PackedBatch
    from ..placement import CopysetSelector

_WAVE_BITS = 16
#: Seconds a node that answered NOSPC is left out of new copysets.
NOSPC_AVOID_S = 2.0


@attrs.frozen
class SendStore:
    node_id: int
    message: Store


@attrs.frozen
class ReplyAppend:
    token: Any
    status: Status
    first_lsn: int = 0
    count: int = 0
    timestamp_ms: int = 0
    message: str = ""
    #: With REDIRECTED: the node that runs the log's sequencer.
    redirect: int | None = None


@attrs.frozen
class SendRelease:
    log_id: int
    nodeset: tuple[int, ...]
    lsn: int


@attrs.frozen
class ConfirmRefusal:
    """Rule 6: ``reply`` refuses an idempotent batch as ahead of, or unknown
    to, this epoch's producer table.  That table is the log's only while no
    newer sequencer exists: one that sealed this epoch may have taken the
    producer's next batches.  The shell reads the log's next epoch from the
    epoch store first; the host sends ``reply`` only if no newer epoch was
    handed out, and otherwise preempts this core and retries the batch on a
    new sequencer (``SequencerHostCore.on_refusal_checked``)."""

    log_id: int
    epoch: int
    batch: PackedBatch
    reply: ReplyAppend


Action = SendStore | ReplyAppend | SendRelease | ConfirmRefusal


@attrs.define(eq=False)
class _Appender:
    seq_id: int
    first_esn: int
    #: The client's batch (its body is passed on as it came).
    batch: PackedBatch
    first_lsn: int
    timestamp_ms: int
    token: Any
    bytes: int
    wave: int = 0
    copyset: tuple[int, ...] = ()
    acked: set[int] = attrs.Factory(set)
    excluded: set[int] = attrs.Factory(set)
    deadline: float = 0.0
    done: bool = False
    #: Waves that ended because their time ran out (not because a node
    #: refused): each doubles the next wave's time, the cluster may be slow.
    timed_out: int = 0
    #: (producer id, sequence number) of an idempotent append.
    producer: tuple[int, int] | None = None
    #: Tokens of retries of this same batch that arrived while it was in flight.
    also: list[Any] = attrs.Factory(list)

    @property
    def last_esn(self) -> int:
        return self.first_esn + len(self.batch) - 1


@attrs.frozen
class SequencerStats:
    epoch: int
    next_esn: int
    last_known_good: int
    released_lsn: int
    appenders_in_flight: int
    bytes_in_flight: int
    waves_retried: int


class SequencerCore:
    """One log's sequencer in one epoch."""

    # Slots, not a dict: a node keeps one per active log (1.6 KB of dict each).
    # fmt: off
    __slots__ = (
        "_bytes", "_held", "_ids", "_inflight", "_waves_reported", "_window", "appenders_max",
        "bytes_max", "down", "epoch", "esn_max", "exhausted", "first_timestamp_ms", "full",
        "last_timestamp_ms", "lng_esn", "log_id", "next_esn", "no_writes", "preempted",
        "producer_expiry_ms", "producers", "producers_known", "recovered", "released_esn",
        "retry_wait_s", "sealed_producers", "selector", "store_timeout_max_s",
        "store_timeout_s", "sync", "waves_retried",
    )
    # fmt: on

    def __init__(
        self,
        log_id: int,
        epoch: int,
        selector: CopysetSelector,
        *,
        sync: bool = False,
        recovered: bool = True,
        appenders_max: int = 1024,
        bytes_max: int = 256 * 1024 * 1024,
        store_timeout_s: float = 2.0,
        store_timeout_max_s: float = 10.0,
        retry_wait_s: float = 0.2,
        ids: Iterator[int] | None = None,
        esn_max: int = ESN_MAX,
        last_timestamp_ms: int = 0,
        producer_expiry_ms: int = EXPIRY_MS,
        sealed_producers: list[tuple[int, Sent]] | None = None,
    ) -> None:
        assert 1 <= epoch < 2**32
        assert 1 <= esn_max <= ESN_MAX
        self.log_id = log_id
        self.epoch = epoch
        self.selector = selector
        self.sync = sync
        self.recovered = recovered
        self.appenders_max = appenders_max
        self.bytes_max = bytes_max
        self.store_timeout_s = store_timeout_s
        self.store_timeout_max_s = store_timeout_max_s
        self.retry_wait_s = retry_wait_s
        #: The highest ESN this epoch hands out (tests lower it); past it the
        #: sequencer is *exhausted* and the host moves the log to a new epoch.
        self.esn_max = esn_max
        self.exhausted = False
        #: Timestamps never go backwards in a log: an append is stamped with
        #: the larger of the clock and the last stamp (from the earlier epochs,
        #: as the seal found it, then this epoch's own).
        self.last_timestamp_ms = last_timestamp_ms
        #: Where it started: recovery stamps nothing of the earlier epochs above it.
        self.first_timestamp_ms = last_timestamp_ms
        self.next_esn = 1
        self.lng_esn = 0  # every ESN up to here is fully stored
        self.released_esn = 0
        self.preempted = False
        self.down: set[int] = set()  # nodes known dead: never picked
        #: node -> until when it is not picked: it answered NOSPC (its disk is
        #: below its free-space floor); tried again after ``NOSPC_AVOID_S``.
        self.full: dict[int, float] = {}
        #: Nodes being rebuilt, drained or emptied: no new copies go there.
        self.no_writes: frozenset[int] = frozenset()
        self._window: OrderedDict[int, _Appender] = OrderedDict()
        # Appender ids, and so STORE ids, come from ``ids``: a host running
        # several cores (several logs, or one log's successive epochs) shares
        # one counter, so that a late STORE reply meant for an earlier core can
        # never be taken for one of a later core's.
        self._ids = ids if ids is not None else itertools.count(1)
        self._bytes = 0
        self.waves_retried = 0
        self._waves_reported = 0
        #: Rule 6: the producers of idempotent appends, known once recovered.
        self.producers = Producers()
        self.producers_known = recovered
        self.producer_expiry_ms = producer_expiry_ms
        #: What the nodes this core's activation sealed hold of producers:
        #: its recovery sifts it (``idempotence._recovery``).
        self.sealed_producers = sealed_producers or []
        self._held: list[tuple[PackedBatch, Any]] = []
        self._inflight: dict[tuple[int, int], _Appender] = {}

    # -- input ------------------------------------------------------------

    def append(self, batch: PackedBatch, token: Any, now: float, now_ms: int) -> list[Action]:
        """Take a batch of records (their LSNs/timestamps are assigned here)."""
        n = len(batch)
        if self.preempted:
            return [ReplyAppend(token, Status.PREEMPTED, message="sequencer was preempted")]
        if n == 0:
            return [ReplyAppend(token, Status.INVALID_PARAM, message="empty append")]
        if batch.producer is not None:
            early = self._judge(batch, token, now_ms)
            if early is not None:
                return early
        size = batch.payload_bytes + n * 32
        if len(self._window) >= self.appenders_max or (
            self._window and self._bytes + size > self.bytes_max
        ):
            return [ReplyAppend(token, Status.OVERLOADED, message="sequencer window is full")]
        if not self.room_for(n):
            # The host asks ``room_for`` first and moves to a new epoch.
            self.exhausted = True
            return [ReplyAppend(token, Status.NOTREADY, message="epoch is out of ESNs")]
        first = self.next_esn
        self.next_esn += n
        base = compose_lsn(self.epoch, first)
        stamp = self.last_timestamp_ms = max(now_ms, self.last_timestamp_ms)
        app = _Appender(next(self._ids), first, batch, base, stamp, token, size)
        if batch.producer is not None:
            pid, seq = app.producer = batch.producer
            self.producers.add(pid, Sent(seq, n, base, stamp))
            self._inflight[pid, seq] = app
        self._window[app.seq_id] = app
        self._bytes += size
        return self._start_wave(app, now)

    def room_for(self, n: int) -> bool:
        """Can this epoch still number ``n`` records?"""
        return not self.exhausted and self.next_esn + n - 1 <= self.esn_max

    def on_stored(self, store_id: int, node_id: int, status: int, now: float) -> list[Action]:
        app = self._window.get(store_id >> _WAVE_BITS)
        if app is None or app.done or (store_id & 0xFFFF) != (app.wave & 0xFFFF):
            return []  # a late answer to an old wave, or a finished appender
        if node_id not in app.copyset:
            return []
        if status == Status.OK:
            app.acked.add(node_id)
            if len(app.acked) >= self.selector.replication:
                return self._complete(app)
            return []
        if status == Status.PREEMPTED:
            return self._preempt()
        if status == Status.NOSPC:
            self.full[node_id] = now + NOSPC_AVOID_S
        app.excluded.add(node_id)
        return self._start_wave(app, now)

    def on_node_down(self, node_id: int, now: float) -> list[Action]:
        """A node is known dead: stop waiting for it anywhere."""
        self.down.add(node_id)
        actions: list[Action] = []
        for app in list(self._window.values()):
            if not app.done and node_id in app.copyset and node_id not in app.acked:
                app.excluded.add(node_id)
                actions += self._start_wave(app, now)
        return actions

    def on_node_up(self, node_id: int) -> None:
        self.down.discard(node_id)

    def tick(self, now: float) -> list[Action]:
        """Start new waves for appenders whose wave timed out."""
        actions: list[Action] = []
        for app in list(self._window.values()):
            if not app.done and app.deadline <= now:
                # The nodes that did not answer in time are slow: try others.
                if app.copyset:
                    app.timed_out += 1
                app.excluded.update(n for n in app.copyset if n not in app.acked)
                actions += self._start_wave(app, now)
        return actions

    def set_recovered(
        self, producers: Producers | None = None, now: float = 0.0, now_ms: int = 0
    ) -> list[Action]:
        """The earlier epochs are clean; ``producers``: what they hold of
        idempotent producers (rule 6), which lets the held appends in."""
        assert not self.preempted, "a preempted sequencer recovers nothing"
        self.recovered = True
        actions = self._maybe_release()
        if not self.producers_known:
            if producers is not None:
                for pid, sent in producers.entries():
                    self.producers.add(pid, sent)
            self.producers_known = True
            held, self._held = self._held, []
            for batch, token in held:
                actions += self.append(batch, token, now, now_ms)
        return actions

    def preempt(self) -> list[Action]:
        """A newer sequencer took over (its recovery overtook ours): fail every
        pending append with PREEMPTED and take no more."""
        return self._preempt()

    def take_waves_retried(self) -> int:
        """Waves started again since the last call (for a counter metric)."""
        n, self._waves_reported = self.waves_retried - self._waves_reported, self.waves_retried
        return n

    # -- queries ----------------------------------------------------------

    def next_deadline(self) -> float | None:
        pending = [a.deadline for a in self._window.values() if not a.done]
        return min(pending) if pending else None

    @property
    def last_known_good_lsn(self) -> int:
        return compose_lsn(self.epoch, self.lng_esn) if self.lng_esn else 0

    @property
    def released_lsn(self) -> int:
        return compose_lsn(self.epoch, self.released_esn) if self.released_esn else 0

    @property
    def idle(self) -> bool:
        return not self._window and not self._held

    def stats(self) -> SequencerStats:
        return SequencerStats(
            self.epoch,
            self.next_esn,
            self.lng_esn,
            self.released_lsn,
            len(self._window),
            self._bytes,
            self.waves_retried,
        )

    # -- internals --------------------------------------------------------

    def _start_wave(self, app: _Appender, now: float) -> list[Action]:
        app.wave += 1
        if app.wave > 1:
            self.waves_retried += 1
        app.acked.clear()
        if self.full:
            self.full = {n: t for n, t in self.full.items() if t > now}
        copyset = self.selector.select(app.excluded | self.down | set(self.full) | self.no_writes)
        if copyset is None:
            # Every candidate failed once (or too few are alive): try them all
            # again after a pause, never at once.  A node that refuses
            # connections fails a STORE in no time, and an immediate new wave
            # on it would spin (it once recursed until the node crashed).
            app.excluded.clear()
            app.copyset = ()
            app.deadline = now + self.retry_wait_s
            return []
        app.copyset = copyset
        timeout = min(self.store_timeout_s * 2 ** min(app.timed_out, 8), self.store_timeout_max_s)
        app.deadline = now + timeout
        store = Store(
            (app.seq_id << _WAVE_BITS) | (app.wave & 0xFFFF),
            self.log_id,
            app.wave,
            copyset,
            # What nodes may take as released: the release pointer, never the
            # LNG, which runs ahead of it until earlier epochs are recovered.
            self.released_lsn,
            self.sync,
            app.batch.restamp(
                first_lsn=app.first_lsn,
                timestamp_ms=app.timestamp_ms,
                wave=app.wave,
                copyset=copyset,
            ),
        )
        return [SendStore(node, store) for node in copyset]

    def _judge(self, batch: PackedBatch, token: Any, now_ms: int) -> list[Action] | None:
        """Rule 6 for an idempotent append: the answer now, or None to store it."""
        if not self.producers_known:
            if len(self._held) >= self.appenders_max:
                return [ReplyAppend(token, Status.OVERLOADED, message="too many appends wait")]
            self._held.append((batch, token))
            return []
        assert batch.producer is not None
        pid, seq = batch.producer
        n = len(batch)
        verdict, sent = self.producers.check(pid, seq, n, now_ms, self.producer_expiry_ms)
        if verdict is Verdict.NEW:
            return None
        if verdict is Verdict.DUPLICATE:
            assert sent is not None
            app = self._inflight.get((pid, seq))
            if app is not None:
                app.also.append(token)
                return []
            return [ReplyAppend(token, Status.OK, sent.lsn, sent.count, sent.timestamp_ms)]
        if verdict is Verdict.FENCED:
            text = f"producer {pid}: a newer producer of its transactional id fenced it"
            return [ReplyAppend(token, Status.FENCED, message=text)]
        if verdict is Verdict.OLD_DUPLICATE:
            text = f"producer {pid}: records {seq}..{seq + n - 1} were appended long ago"
            return [ReplyAppend(token, Status.DUPLICATE, message=text)]
        if verdict is Verdict.UNKNOWN:
            text = (
                f"producer {pid} is unknown to log {self.log_id} (it expired or was "
                f"evicted), and its batch starts at record {seq}, not 0"
            )
            reply = ReplyAppend(token, Status.UNKNOWN_PRODUCER, message=text)
            return [ConfirmRefusal(self.log_id, self.epoch, batch, reply)]
        expected = sent.last_seq + 1 if sent is not None else 0
        text = f"producer {pid}: batch {seq}..{seq + n - 1} does not follow {expected - 1}"
        reply = ReplyAppend(token, Status.OUT_OF_SEQUENCE, message=text)
        if seq < expected:
            return [reply]  # behind the table: a newer sequencer cannot change that
        return [ConfirmRefusal(self.log_id, self.epoch, batch, reply)]

    def _complete(self, app: _Appender) -> list[Action]:
        app.done = True
        first_lsn = compose_lsn(self.epoch, app.first_esn)
        actions: list[Action] = [
            ReplyAppend(t, Status.OK, first_lsn, len(app.batch), app.timestamp_ms)
            for t in (app.token, *app.also)
        ]
        if app.producer is not None:
            self._inflight.pop(app.producer, None)
        # Slide the window over the finished prefix.
        while self._window:
            oldest = next(iter(self._window.values()))
            if not oldest.done:
                break
            del self._window[oldest.seq_id]
            self._bytes -= oldest.bytes
            self.lng_esn = oldest.last_esn
        return actions + self._maybe_release()

    def _maybe_release(self) -> list[Action]:
        if not self.recovered or self.lng_esn <= self.released_esn:
            return []
        self.released_esn = self.lng_esn
        lsn = compose_lsn(self.epoch, self.released_esn)
        return [SendRelease(self.log_id, self.selector.nodeset, lsn)]

    def _preempt(self) -> list[Action]:
        self.preempted = True
        text = "a newer sequencer sealed this epoch"
        tokens = [t for a in self._window.values() if not a.done for t in (a.token, *a.also)]
        tokens += [t for _, t in self._held]
        actions: list[Action] = [ReplyAppend(t, Status.PREEMPTED, message=text) for t in tokens]
        self._window.clear()
        self._held.clear()
        self._inflight.clear()
        self._bytes = 0
        return actions

"""A simulated client: appends unique payloads where it believes each log's
sequencer runs, as the real client routes them."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from logstrand.batch import PackedBatch
from logstrand.errors import Status
from logstrand.placement import rendezvous_owner
from logstrand.wire import (
    Append,
    AppendReply,
)

from .config import LOG, Address
from .node import Endpoint

if TYPE_CHECKING:
    from .world import World


class SimClient(Endpoint):
    """Appends with unique payloads to the node it believes runs the sequencer."""

    def __init__(self, world: World, client_id: int) -> None:
        super().__init__(world, client_id)
        self.appending = True
        #: request id -> (log, payloads, first sent, batch, attempt)
        self.in_flight: dict[int, tuple[int, list[bytes], float, PackedBatch, int]] = {}
        logs = world.config.log_ids
        #: Idempotence, per log: the producer id and the next number; ids of
        #: batches out (oldest first); a new id after a batch is given up.
        self.producer = dict.fromkeys(logs, client_id * 1000)
        self.next_seq = dict.fromkeys(logs, 0)
        self.out: dict[int, list[tuple[int, int]]] = {log: [] for log in logs}
        #: payload -> its LSN, when it was acknowledged, its log
        self.acked: dict[bytes, int] = {}
        self.acked_at: dict[bytes, float] = {}
        self.log_of: dict[bytes, int] = {}
        self.attempted: set[bytes] = set()
        #: log -> (sent, acknowledged, LSN) of its appends
        self.history: dict[int, list[tuple[float, float, int]]] = {log: [] for log in logs}
        self.ids = itertools.count(1)
        self.counter = itertools.count(1)
        self.view: tuple[int, ...] = tuple(world.nodes)
        #: Where a node redirected appends to each log.
        self.hint: dict[int, int] = {}
        #: The fence append's LSN, per log fenced.
        self.fenced: dict[int, int] = {}
        self._fencing: set[int] = set()
        #: Logs this client has not appended to yet (the first burst).
        self.unstarted = list(logs) if world.config.logs > 1 else []

    def target(self, log: int) -> int:
        """The log's owner by rendezvous over this client's view of the
        membership (which lags), or where a node redirected it."""
        rng = self.world.rng
        if rng.random() < 0.05:
            return rng.choice(sorted(self.world.nodes))  # a stale or confused view
        hint = self.hint.get(log)
        if hint is not None:
            return hint
        return rendezvous_owner(log, dict.fromkeys(self.view, 1.0)) or 1

    def refresh(self) -> None:
        self.view = tuple(sorted(self.world.members))

    def tick(self) -> None:
        world = self.world
        if rng_hit(world, 0.2):
            # The client's view of which nodes are alive lags behind the truth.
            self.refresh()
        if self.unstarted:
            # The burst: one append to every log at once, no bound in flight.
            for log in self.unstarted:
                self.append(log, [b"c%d-%d" % (self.id, next(self.counter))])
            self.unstarted = []
        if self.appending and len(self.in_flight) < world.config.in_flight_max:
            count = world.rng.randint(1, 4)
            log = LOG if world.config.logs == 1 else world.rng.choice(world.config.log_ids)
            self.append(log, [b"c%d-%d" % (self.id, next(self.counter)) for _ in range(count)])
        if self.appending or self.in_flight:
            world.at(world.rng.expovariate(1 / world.config.append_every_s), self.tick)

    def append(self, log: int, payloads: list[bytes]) -> None:
        self.attempted.update(payloads)
        self.log_of.update(dict.fromkeys(payloads, log))
        n = len(payloads)
        number = None
        if not self.world.config.break_idempotence:
            number = (self.producer[log], self.next_seq[log])
            self.next_seq[log] += n
            self.out[log].append(number)
        keys = self.world.config.keys
        rng = self.world.rng
        batch = PackedBatch.for_append(
            [b"k%d" % rng.randrange(keys) if keys else None for _ in payloads],
            payloads,
            producer=number,
        )
        self._send(log, payloads, self.world.now, batch, 0)

    def _send(
        self, log: int, payloads: list[bytes], sent: float, batch: PackedBatch, attempt: int
    ) -> None:
        rid = next(self.ids)
        self.in_flight[rid] = (log, payloads, sent, batch, attempt)
        self.send(self.target(log), Append(rid, log, batch))
        self.world.at(1.5, self._timeout, rid)

    def _retry(self, rid: int, *, wait: bool = False) -> None:
        """Send a batch again, or give it up after ``config.retries``."""
        log, payloads, sent, batch, attempt = self.in_flight.pop(rid)
        if attempt < self.world.config.retries or wait:
            self.world.at(0.05, self._send, log, payloads, sent, batch, attempt + 1)
            return
        self.world.note(f"client {self.id} gives up {payloads[0]!r}")
        if batch.producer is not None:
            self.out[log].remove(batch.producer)
            if batch.producer[0] == self.producer[log]:
                # What follows it can never follow it: a new producer.
                self.producer[log] += 1
                self.next_seq[log] = 0

    def _timeout(self, rid: int) -> None:
        if rid in self.in_flight:
            log = self.in_flight[rid][0]
            self.world.note(f"client {self.id} append {rid} timed out")
            self._retry(rid)
            self._after_failure(log)

    def receive(self, src: Address, msg: Any) -> None:
        if not isinstance(msg, AppendReply):
            return
        got = self.in_flight.get(msg.request_id)
        if got is None:
            return  # a duplicate, or after the timeout
        log, payloads, sent, batch, _ = got
        if msg.status in (Status.OUT_OF_SEQUENCE, Status.UNKNOWN_PRODUCER):
            # Not yet, while an earlier batch of this producer is out.
            number = batch.producer
            assert number is not None
            oldest = min(s for p, s in self.out[log] if p == number[0]) == number[1]
            if oldest:
                self.world.note(f"client {self.id}: {Status(msg.status).name} for the oldest")
            self._retry(msg.request_id, wait=not oldest)
            return
        if msg.status != Status.OK:
            self._retry(msg.request_id)
        else:
            del self.in_flight[msg.request_id]
            if batch.producer is not None:
                self.out[log].remove(batch.producer)
        if msg.status == Status.OK:
            assert msg.count == len(payloads)
            for i, p in enumerate(payloads):
                self.acked[p] = msg.first_lsn + i
                self.acked_at[p] = self.world.now
            self.history[log].append((sent, self.world.now, msg.first_lsn))
            where = "" if self.world.config.logs == 1 else f" in log {log}"
            self.world.note(f"client {self.id} acked {msg.first_lsn:#x}+{msg.count}{where}")
            if log in self._fencing:
                self._fencing.discard(log)
                self.fenced[log] = msg.first_lsn + msg.count - 1
        else:
            if msg.status == Status.REDIRECTED and msg.redirect is not None:
                self.hint[log] = msg.redirect
            self._after_failure(log, redirected=msg.status == Status.REDIRECTED)

    def _after_failure(self, log: int, redirected: bool = False) -> None:
        if not redirected:
            self.hint.pop(log, None)
        self.refresh()
        if log in self._fencing:
            self.world.at(0.1, self._fence_again, log)

    def fence(self, log: int) -> None:
        """One more append to ``log``, retried until acknowledged."""
        self._fencing.add(log)
        self.refresh()
        self.append(
            log, [b"fence-%d" % self.id if log == LOG else b"fence-%d-l%d" % (self.id, log)]
        )

    def _fence_again(self, log: int) -> None:
        if log in self._fencing:
            self.append(log, [b"fence-%d-%d" % (self.id, next(self.counter))])


def rng_hit(world: World, p: float) -> bool:
    return world.rng.random() < p

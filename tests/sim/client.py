"""A simulated client: appends unique payloads where it believes the log's
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
        #: request id -> (payloads, first sent, batch, attempt)
        self.in_flight: dict[int, tuple[list[bytes], float, PackedBatch, int]] = {}
        #: Idempotence: the producer id and the next number; ids of batches
        #: out (oldest first); a new id after a batch is given up.
        self.producer = client_id * 1000
        self.next_seq = 0
        self.out: list[tuple[int, int]] = []
        self.acked: dict[bytes, int] = {}
        self.acked_at: dict[bytes, float] = {}
        self.attempted: set[bytes] = set()
        self.history: list[tuple[float, float, int]] = []
        self.ids = itertools.count(1)
        self.counter = itertools.count(1)
        self.view: tuple[int, ...] = tuple(world.nodes)
        self.hint: int | None = None
        self.fenced: int | None = None
        self._fencing = False

    def target(self) -> int:
        """The log's owner by rendezvous over this client's view of the
        membership (which lags), or where a node redirected it."""
        rng = self.world.rng
        if rng.random() < 0.05:
            return rng.choice(sorted(self.world.nodes))  # a stale or confused view
        if self.hint is not None:
            return self.hint
        return rendezvous_owner(LOG, dict.fromkeys(self.view, 1.0)) or 1

    def refresh(self) -> None:
        self.view = tuple(sorted(self.world.members))

    def tick(self) -> None:
        world = self.world
        if rng_hit(world, 0.2):
            # The client's view of which nodes are alive lags behind the truth.
            self.refresh()
        if self.appending and len(self.in_flight) < world.config.in_flight_max:
            count = world.rng.randint(1, 4)
            self.append([b"c%d-%d" % (self.id, next(self.counter)) for _ in range(count)])
        if self.appending or self.in_flight:
            world.at(world.rng.expovariate(1 / world.config.append_every_s), self.tick)

    def append(self, payloads: list[bytes]) -> None:
        self.attempted.update(payloads)
        n = len(payloads)
        number = None
        if not self.world.config.break_idempotence:
            number = (self.producer, self.next_seq)
            self.next_seq += n
            self.out.append(number)
        keys = self.world.config.keys
        rng = self.world.rng
        batch = PackedBatch.for_append(
            [b"k%d" % rng.randrange(keys) if keys else None for _ in payloads],
            payloads,
            producer=number,
        )
        self._send(payloads, self.world.now, batch, 0)

    def _send(self, payloads: list[bytes], sent: float, batch: PackedBatch, attempt: int) -> None:
        rid = next(self.ids)
        self.in_flight[rid] = (payloads, sent, batch, attempt)
        self.send(self.target(), Append(rid, LOG, batch))
        self.world.at(1.5, self._timeout, rid)

    def _retry(self, rid: int, *, wait: bool = False) -> None:
        """Send a batch again, or give it up after ``config.retries``."""
        payloads, sent, batch, attempt = self.in_flight.pop(rid)
        if attempt < self.world.config.retries or wait:
            self.world.at(0.05, self._send, payloads, sent, batch, attempt + 1)
            return
        self.world.note(f"client {self.id} gives up {payloads[0]!r}")
        if batch.producer is not None:
            self.out.remove(batch.producer)
            if batch.producer[0] == self.producer:
                # What follows it can never follow it: a new producer.
                self.producer += 1
                self.next_seq = 0

    def _timeout(self, rid: int) -> None:
        if rid in self.in_flight:
            self.world.note(f"client {self.id} append {rid} timed out")
            self._retry(rid)
            self._after_failure()

    def receive(self, src: Address, msg: Any) -> None:
        if not isinstance(msg, AppendReply):
            return
        got = self.in_flight.get(msg.request_id)
        if got is None:
            return  # a duplicate, or after the timeout
        payloads, sent, batch, _ = got
        if msg.status in (Status.OUT_OF_SEQUENCE, Status.UNKNOWN_PRODUCER):
            # Not yet, while an earlier batch of this producer is out.
            number = batch.producer
            assert number is not None
            oldest = min(s for p, s in self.out if p == number[0]) == number[1]
            if oldest:
                self.world.note(f"client {self.id}: {Status(msg.status).name} for the oldest")
            self._retry(msg.request_id, wait=not oldest)
            return
        if msg.status != Status.OK:
            self._retry(msg.request_id)
        else:
            del self.in_flight[msg.request_id]
            if batch.producer is not None:
                self.out.remove(batch.producer)
        if msg.status == Status.OK:
            assert msg.count == len(payloads)
            for i, p in enumerate(payloads):
                self.acked[p] = msg.first_lsn + i
                self.acked_at[p] = self.world.now
            self.history.append((sent, self.world.now, msg.first_lsn))
            self.world.note(f"client {self.id} acked {msg.first_lsn:#x}+{msg.count}")
            if self._fencing:
                self._fencing = False
                self.fenced = msg.first_lsn + msg.count - 1
        else:
            if msg.status == Status.REDIRECTED and msg.redirect is not None:
                self.hint = msg.redirect
            self._after_failure(redirected=msg.status == Status.REDIRECTED)

    def _after_failure(self, redirected: bool = False) -> None:
        if not redirected:
            self.hint = None
        self.refresh()
        if self._fencing:
            self.world.at(0.1, self._fence_again)

    def fence(self) -> None:
        self._fencing = True
        self.refresh()
        self.append([b"fence-%d" % self.id])

    def _fence_again(self) -> None:
        if self._fencing:
            self.append([b"fence-%d-%d" % (self.id, next(self.counter))])


def rng_hit(world: World, p: float) -> bool:
    return world.rng.random() < p

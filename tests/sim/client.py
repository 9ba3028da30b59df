"""A simulated client: appends unique payloads where it believes the log's
sequencer runs, as the real client routes them."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from logstrand.errors import Status
from logstrand.packed import PackedBatch
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
        self.in_flight: dict[int, tuple[list[bytes], float]] = {}
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
        rid = next(self.ids)
        self.attempted.update(payloads)
        n = len(payloads)
        batch = PackedBatch.for_append([None] * n, payloads)
        self.in_flight[rid] = (payloads, self.world.now)
        self.send(self.target(), Append(rid, LOG, batch))
        self.world.at(1.5, self._timeout, rid)

    def _timeout(self, rid: int) -> None:
        if self.in_flight.pop(rid, None) is not None:
            self.world.note(f"client {self.id} append {rid} timed out")
            self._after_failure()

    def receive(self, src: Address, msg: Any) -> None:
        if not isinstance(msg, AppendReply):
            return
        got = self.in_flight.pop(msg.request_id, None)
        if got is None:
            return  # a duplicate, or after the timeout
        payloads, sent = got
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

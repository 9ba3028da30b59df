"""What a server takes in: bounded in memory, fair between connections.

Theory of operation
-------------------
Every byte a server holds of what a peer sent is counted until it is done
with: bytes of a frame not yet complete, then the frame of each request
until the request is answered (the reply is queued: ``settle``), or until
its handler returns for a message that has no answer.  Counts go to three
places, and reading a connection waits while any is over its bound:

* the connection's own: at most ``requests_max`` requests (an
  ``AppendMany`` counts one per entry) and
  ``request_bytes_max`` bytes unanswered, and ``replies_queued_max`` replies
  queued that the peer has not read.  A connection at its bound is not read
  until its requests are answered, whatever their size: a client that floods
  slows itself, and requests are taken from connections in turn;
* its *pool*: every client connection of the node together (``--receive-budget``),
  or every connection from another node together (its own pool, so that
  clients can never hold up the STOREs their own appends wait for);
* in secure mode, its user's: ``principal_bytes_max`` over all of that user's
  connections.

A connection that may not read for want of budget reads nothing (TCP pushes
back on its peer) rather than the node growing.  One exception keeps small
requests moving while large ones wait: a connection holding nothing may
always take ``allowance`` bytes, so the node holds at most its budget plus
``allowance`` per connection.

A frame must also come at a minimum rate: within ``frame_grace_s`` plus its
size at ``frame_min_rate`` bytes a second of its first byte.  Past that the
connection is closed: a peer cannot hold memory with a frame it trickles or
never ends.  The clock runs while a connection waits for budget too: were
it stopped, connections whose stalled frames hold the budget would wait for
each other for ever.  (Under such an attack a large frame of an honest
client may miss its deadline too; the client library sends it again on a
new connection.)

A request that stays unanswered ``request_age_max_s`` is no longer counted
(its bytes are, as they were, still held by whatever holds the request; the
node counts it in ``logstrand_requests_abandoned``), so that a request some
handler forgot can never stop a connection for good.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..wire import AppendMany, Store, StoreMany, StoreReplies, StoreReply

if TYPE_CHECKING:
    from collections.abc import Callable


@attrs.frozen
class IntakeLimits:
    #: Requests one connection may have unanswered, and their bytes (one
    #: larger request is taken alone).  Little's law: past what keeps the
    #: node busy, more in flight only makes everyone else queue behind it
    #: (a 60 kB APPEND flood: others' p50 4.3x with 512 KiB, 7.4x with 1 MiB,
    #: 23x with 4 MiB, for the same flood throughput; docs/operations.md).
    requests_max: int = 128
    request_bytes_max: int = 512 * 1024
    #: Replies queued on one connection that its peer has not read yet.
    replies_queued_max: int = 4096
    #: A frame takes at most this long plus its size at ``frame_min_rate``.
    frame_grace_s: float = 10.0
    frame_min_rate: int = 1024 * 1024
    #: What a connection holding nothing may always take, budget or not.
    allowance: int = 16 * 1024
    request_age_max_s: float = 60.0


DEFAULT_INTAKE = IntakeLimits()
#: Between nodes: STOREs of every log share one connection, and what clients
#: may have in flight bounds them already.
PEER_INTAKE = IntakeLimits(requests_max=16_384, request_bytes_max=64 * 1024 * 1024)


class Budget:
    """Bytes held together by many connections (a pool, or one user's)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._freed = trio.Event()

    def fits(self, n: int) -> bool:
        return self.used + n <= self.limit

    def take(self, n: int) -> None:
        self.used += n
        self.peak = max(self.peak, self.used)

    def give(self, n: int) -> None:
        if n:
            self.used -= n
            self._freed.set()

    async def wait_freed(self) -> None:
        """Until some bytes are given back."""
        if self._freed.is_set():
            self._freed = trio.Event()
        await self._freed.wait()


def _weight(msg: Any) -> int:
    """How many requests ``msg`` counts for: an ``AppendMany`` one per entry
    (at least one), so that batching buys no more work in flight."""
    if type(msg) is AppendMany:
        return max(1, len(msg.log_ids))
    return 1


def request_key(msg: Any) -> tuple[str, int] | None:
    """What a request's answer carries to match it (None: no answer comes)."""
    if type(msg) is Store:
        return ("s", msg.store_id)
    request_id = getattr(msg, "request_id", None)
    return None if request_id is None else ("r", request_id)


def reply_key(msg: Any) -> tuple[str, int] | None:
    """The key of the request ``msg`` answers (None: it answers none).  A
    server sends requests of its own on connections it makes, never on one
    it accepted: what it sends there with a request id is an answer."""
    if type(msg) is StoreReply:
        return ("s", msg.store_id)
    request_id = getattr(msg, "request_id", None)
    return None if request_id is None else ("r", request_id)


class Intake:
    """One connection's share of what its server takes in (see the module
    docstring).  The connection calls ``may_read``/``wait_turn`` and
    ``take``/``reserve`` before each read, ``received`` after it,
    ``decoded`` for each message, and ``settle`` for each message it sends.
    The usual case costs a few comparisons: only a connection at a bound
    awaits anything."""

    __slots__ = (
        "_budgets",
        "_changed",
        "_on_abandoned",
        "_pending",
        "_reserved",
        "limits",
        "partial",
        "pool",
        "request_bytes",
        "requests",
        "user",
    )

    def __init__(
        self,
        limits: IntakeLimits,
        pool: Budget,
        user: Budget | None = None,
        *,
        on_abandoned: Callable[[int], None] | None = None,
    ) -> None:
        self.limits = limits
        self.pool = pool
        self.user = user
        self._budgets = (pool,) if user is None else (pool, user)
        self._on_abandoned = on_abandoned
        #: Bytes read and not yet a whole frame (of them, ``_reserved`` holds).
        self.partial = 0
        self._reserved = 0
        #: Unanswered requests: key -> [(bytes, since, weight)]; an
        #: ``AppendMany`` weighs as many requests as it has entries.
        self._pending: dict[tuple[str, int], list[tuple[int, float, int]]] = {}
        self.requests = 0
        self.request_bytes = 0
        self._changed = trio.Event()

    @property
    def held(self) -> int:
        """Bytes this connection holds (partial frames, unanswered requests)."""
        return self._reserved + self.request_bytes

    # -- reading ----------------------------------------------------------------

    def may_read(self, queued: int) -> bool:
        """Under its own bounds (``queued``: replies the peer has not read)."""
        lim = self.limits
        return (
            self.requests < lim.requests_max
            and self.request_bytes < lim.request_bytes_max
            and queued < lim.replies_queued_max
        )

    async def wait_turn(self, queued: Callable[[], int]) -> None:
        """Wait while this connection is at its own bounds."""
        while not self.may_read(queued()):
            self._abandon_old()
            if self.may_read(queued()):
                return
            if self._changed.is_set():
                self._changed = trio.Event()
            with trio.move_on_after(1.0):
                await self._changed.wait()

    def take(self, want: int) -> int:
        """Reserve room to read up to ``want`` bytes now, as far as the
        budgets allow; 0 when they allow nothing."""
        budgets = self._budgets
        room = budgets[0].limit - budgets[0].used
        if len(budgets) > 1:
            room = min(room, budgets[1].limit - budgets[1].used)
        if self._reserved == 0 and self.request_bytes == 0:
            room = max(room, self.limits.allowance)
        if room <= 0:
            return 0
        n = want if want < room else room
        for b in budgets:
            b.take(n)
        self._reserved += n
        return n

    async def reserve(self, want: int) -> int:
        """``take``, waiting for budget until it gives at least one byte."""
        while not (n := self.take(want)):
            full = next(b for b in self._budgets if b.used >= b.limit)
            with trio.move_on_after(1.0):
                await full.wait_freed()
        return n

    def received(self, n: int, reserved: int) -> None:
        """``n`` bytes came of the ``reserved``: give the rest back."""
        if reserved != n:
            self._give(reserved - n)
            self._reserved -= reserved - n
        self.partial += n

    def decoded(self, msg: Any, frame_bytes: int) -> None:
        """A whole frame became ``msg``: its bytes now belong to the request."""
        self.partial -= frame_bytes
        self._reserved -= frame_bytes
        if type(msg) is StoreMany:
            # Each entry is a STORE of its own, answered alone (maybe in
            # another write than the others): each holds its share.
            n = len(msg.store_ids)
            share, extra = divmod(frame_bytes, n)
            for i, store_id in enumerate(msg.store_ids):
                self._hold(("s", store_id), share + (extra if i == 0 else 0), 1)
            return
        key = request_key(msg)
        if key is None:
            self._give(frame_bytes)
            return
        self._hold(key, frame_bytes, _weight(msg))

    def _hold(self, key: tuple[str, int], size: int, weight: int) -> None:
        entry = (size, trio.current_time(), weight)
        sizes = self._pending.get(key)
        if sizes is None:
            self._pending[key] = [entry]
        else:
            sizes.append(entry)
        self.requests += weight
        self.request_bytes += size

    def settle(self, msg: Any) -> None:
        """``msg`` is being sent: if it answers a request, that request is done."""
        if self._pending:
            if type(msg) is StoreReplies:
                for store_id in msg.store_ids:
                    self.settle_key(("s", store_id))
                return
            key = reply_key(msg)
            if key is not None:
                self.settle_key(key)

    def unanswered(self, msg: Any) -> None:
        """``msg`` will get no answer (no handler took it): done now."""
        key = request_key(msg)
        if key is not None:
            self.settle_key(key)

    def settle_key(self, key: tuple[str, int]) -> None:
        sizes = self._pending.get(key)
        if not sizes:
            return
        size, _, weight = sizes.pop(0)
        if not sizes:
            del self._pending[key]
        self._done(size, weight)

    def _done(self, size: int, weight: int) -> None:
        self.requests -= weight
        self.request_bytes -= size
        self._give(size)
        self._changed.set()

    def _give(self, n: int) -> None:
        for b in self._budgets:
            b.give(n)

    def _abandon_old(self) -> None:
        """Stop counting requests unanswered for ``request_age_max_s`` (looked
        at only while the connection waits: at most ``requests_max`` of them)."""
        horizon = trio.current_time() - self.limits.request_age_max_s
        for key, sizes in list(self._pending.items()):
            old = [e for e in sizes if e[1] <= horizon]
            if not old:
                continue
            sizes[:] = [e for e in sizes if e[1] > horizon]
            if not sizes:
                del self._pending[key]
            for size, _, weight in old:
                self._done(size, weight)
            if self._on_abandoned is not None:
                self._on_abandoned(len(old))

    def frame_deadline(self, started: float, claimed: int) -> float:
        """When a frame of ``claimed`` bytes begun at ``started`` must be in."""
        lim = self.limits
        rate = lim.frame_min_rate
        return started + lim.frame_grace_s + (claimed / rate if rate else math.inf)

    def close(self) -> None:
        """The connection ended: everything it held is given back."""
        self._give(self._reserved + self.request_bytes)
        self._reserved = self.partial = 0
        self.requests = self.request_bytes = 0
        self._pending.clear()
        self._changed.set()

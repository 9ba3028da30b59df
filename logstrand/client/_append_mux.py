"""Many logs' APPENDs to one node leave together, in an ``AppendMany``.

Rules
-----
1. An attempt goes to its node alone (an ``Append``) when nothing else is
   out to that node: a lone append pays for no gathering.  While requests
   to the node are out, attempts wait in the node's outbox, and what
   gathered there leaves in one ``AppendMany`` (at most ``APPEND_MANY_MAX``
   batches and ``MANY_BYTES_MAX`` bytes; a batch bigger than that goes
   alone), as one log's records wait in its batcher while its batches are
   out (one that found no company when its turn came goes alone too).  A
   Kafka producer sends one ProduceRequest per broker the same way.
2. At most ``MANY_IN_FLIGHT`` requests and ``window`` batches
   (``appends_in_flight_per_node``) per node are out; the outbox waits
   meanwhile, and an entry's attempt clock starts when it leaves.  The
   node counts an ``AppendMany`` as one request per entry: gathering buys
   fewer messages, not more work in flight (ten thousand batches let out
   at once, in requests of a thousand, collapsed a node under retries).
3. Each entry's outcome is an ``AppendReply``, as if it had gone alone;
   what befalls the request (no answer in time, the connection lost, the
   node found dead) befalls each of its entries, whose appends retry as
   they would have.  A request refused as a whole (no permission on one
   of its logs; a node of protocol 3, which does not know it) is sent
   again entry by entry, alone.
4. Attempts for logs this node appended for last time (their sequencers
   run there: *warm*) and for any other log (*cold*: it may first have to
   be activated, which can take seconds) wait in two outboxes, and a
   request carries one kind only.  An ``AppendMany`` is answered when its
   last entry is: after a node with a third of 20,000 active logs
   restarted, appends to logs whose sequencers never moved timed out at
   60 s behind entries for logs being activated in the same requests.
   (Sending every cold attempt alone instead halved the rate of a burst of
   first appends: 20,000 of them went at 246/s, against 450/s gathered.)
5. An attempt that retries an append goes to the front of its outbox, not
   to the back (Kafka's producer re-enqueues a retried batch first too):
   appends bounced by a node that was still starting went back behind
   thousands sent after them, and timed out while those succeeded (128 of
   20,000 after a restart, in an ad-hoc run; ``test_append_mux`` holds
   the order).
6. A batch's first attempt needs no task of its own (``launch``): its
   entry waits in the outbox with a callback, the request's task (one per
   request, not per batch) finishes it, and only an attempt that did not
   succeed becomes a task, which retries it (``Attempts.launch``).  One
   more record to each of 10,000 logs made a task and three cancel scopes
   per batch, and entering those scopes was half of the client's time.
   An entry that found nothing to gather with goes as a plain ``Append``
   from that request's task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..errors import LogstrandError, Status
from ..wire import APPEND_MANY_MAX, AppendManyReply, AppendReply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..batch import PackedBatch

#: Requests (``Append`` or ``AppendMany``) out to one node at once.
MANY_IN_FLIGHT = 8
#: Bytes of batches one ``AppendMany`` carries at most.
MANY_BYTES_MAX = 4 * 1024 * 1024
#: The protocol version that knows ``AppendMany``.
MANY_PROTOCOL = 4
#: Logs a node's mux remembers as appended for (rule 4); past this it forgets all.
KNOWN_MAX = 1 << 20

Outcome = tuple[AppendReply | None, str]


class Entry:
    """One attempt waiting in an outbox, then for its outcome: awaited
    (``done``), or handed to ``callback`` (rule 6)."""

    __slots__ = ("_done", "alone", "batch", "callback", "finished", "log_id", "outcome")

    def __init__(
        self,
        log_id: int,
        batch: PackedBatch,
        callback: Callable[[Entry], None] | None = None,
    ) -> None:
        self.log_id = log_id
        self.batch = batch
        self.callback = callback
        self._done: trio.Event | None = None
        self.finished = False
        self.outcome: Outcome = (None, "no attempt")
        #: Refused as part of a request: goes again alone (rule 3).
        self.alone = False

    @property
    def done(self) -> trio.Event:
        """Set when the outcome is in (made only for an awaited entry)."""
        if self._done is None:
            self._done = trio.Event()
            if self.finished:
                self._done.set()
        return self._done

    def finish(self, outcome: Outcome) -> None:
        if self.finished:
            return
        self.outcome = outcome
        self._end()

    def go_alone(self) -> None:
        """Refused as part of a request (rule 3): not tried, goes again alone."""
        if not self.finished:
            self.alone = True
            self.outcome = (None, "refused as part of a request")
            self._end()

    def _end(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()
        if self.callback is not None:
            self.callback(self)


class NodeMux:
    """The APPENDs of one client to one node (see the module docstring).

    ``alone(log_id, batch)``: one attempt with an ``Append``;
    ``together(entries)``: one attempt with an ``AppendMany``, which
    finishes every entry (or marks it ``alone``)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        alone: Callable[[int, PackedBatch], Awaitable[Outcome]],
        together: Callable[[list[Entry]], Awaitable[None]],
        window: int,
    ) -> None:
        self._nursery = nursery
        self._window = window
        self._entries_out = 0
        self._alone = alone
        self._together = together
        #: Attempts waiting for a request: warm ones, cold ones (rule 4).
        self._warm: list[Entry] = []
        self._cold: list[Entry] = []
        self._out = 0
        self._starting = False
        #: Logs whose last attempt here was appended (rule 4).
        self._known: set[int] = set()

    async def attempt(self, log_id: int, batch: PackedBatch, *, again: bool = False) -> Outcome:
        """One attempt for ``log_id``'s ``batch``; ``again``: it retries (rule 5)."""
        if (self._out == 0 and not (self._warm or self._cold)) or len(batch.data) > MANY_BYTES_MAX:
            outcome = await self._single(log_id, batch)
        else:
            entry = Entry(log_id, batch)
            box = self._warm if log_id in self._known else self._cold
            if again:
                box.insert(0, entry)
            else:
                box.append(entry)
            self._kick()
            await entry.done.wait()
            outcome = await self._single(log_id, batch) if entry.alone else entry.outcome
        self._learn(log_id, outcome)
        return outcome

    def launch(self, log_id: int, batch: PackedBatch, callback: Callable[[Entry], None]) -> None:
        """A first attempt without a task of its own (rule 6): ``callback``
        gets the entry once its outcome is in (``entry.alone``: the request
        was refused as a whole, and it was not tried)."""

        def learn(entry: Entry) -> None:
            if not entry.alone:
                self._learn(entry.log_id, entry.outcome)
            callback(entry)

        entry = Entry(log_id, batch, learn)
        (self._warm if log_id in self._known else self._cold).append(entry)
        self._kick()

    def _learn(self, log_id: int, outcome: Outcome) -> None:
        reply = outcome[0]
        if reply is not None and reply.status == Status.OK:
            if len(self._known) >= KNOWN_MAX:
                self._known.clear()
            self._known.add(log_id)
        else:
            self._known.discard(log_id)

    async def _single(self, log_id: int, batch: PackedBatch) -> Outcome:
        self._out += 1
        self._entries_out += 1
        try:
            return await self._alone(log_id, batch)
        finally:
            self._out -= 1
            self._entries_out -= 1
            self._kick()

    def _kick(self) -> None:
        """Start a request for the outbox if there is room (rule 2); it takes
        the outbox when it runs, after what is ready to queue has queued."""
        if (
            (self._warm or self._cold)
            and not self._starting
            and self._out < MANY_IN_FLIGHT
            and self._entries_out < self._window
        ):
            self._starting = True
            self._out += 1
            try:
                self._nursery.start_soon(self._send)
            except RuntimeError:  # the client is closing
                self._starting = False
                self._out -= 1
                entries, self._warm, self._cold = self._warm + self._cold, [], []
                for entry in entries:
                    entry.finish((None, "client is closed"))

    async def _send(self) -> None:
        self._starting = False
        entries = self._take()
        self._entries_out += len(entries)
        self._kick()  # more waits: another request may leave beside this one
        try:
            if len(entries) == 1:
                # No company came: an APPEND of its own, from here for a
                # launched entry (rule 6), else from the attempt's task.
                entry = entries[0]
                if entry.callback is None:
                    send_alone(entries)
                else:
                    try:
                        entry.finish(await self._alone(entry.log_id, entry.batch))
                    except LogstrandError:
                        # Not this task's to raise (a refused login, say): the
                        # entry's own task tries it again and raises it there.
                        send_alone(entries)
            elif entries:
                await self._together(entries)
        finally:
            for entry in entries:
                if not entry.finished:
                    entry.finish((None, "the request ended without an answer"))
            self._out -= 1
            self._entries_out -= len(entries)
            self._kick()

    def _take(self) -> list[Entry]:
        warm = bool(self._warm)
        outbox = self._warm if warm else self._cold
        size = 0
        n = 0
        most = min(APPEND_MANY_MAX, max(1, self._window - self._entries_out))
        while n < len(outbox) and n < most:
            size += len(outbox[n].batch.data)
            if n and size > MANY_BYTES_MAX:
                break
            n += 1
        taken = outbox[:n]
        if warm:
            self._warm = outbox[n:]
        else:
            self._cold = outbox[n:]
        return taken


def settle(entries: list[Entry], reply: object, why: str) -> None:
    """Finish each entry from a request's outcome (rule 3): its part of an
    ``AppendManyReply``, or ``why`` when none came."""
    if isinstance(reply, AppendManyReply) and len(reply.statuses) == len(entries):
        for i, entry in enumerate(entries):
            entry.finish((reply.reply(i, len(entry.batch)), ""))
        return
    if reply is not None and not why:
        why = f"a malformed answer to APPEND_MANY ({type(reply).__name__})"
    for entry in entries:
        entry.finish((None, why))


def send_alone(entries: list[Entry]) -> None:
    """The request was refused as a whole: each entry goes again alone."""
    for entry in entries:
        entry.go_alone()

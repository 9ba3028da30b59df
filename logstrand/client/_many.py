"""Reading many logs at once: one loop for all of them, no task per log.

A ``ManyReader`` holds one ``ReadStream`` per log but drives them itself: the
links put every stream's messages into one mailbox (``_Slot`` per log, each
bounded as a stream's own inbox is), and a turn of the loop hands each
message to its log's stream, lets the logs that got something (or whose
timer came: a stall, a node to reconnect) deliver, and queues what they
delivered.  A log with nothing new costs nothing: no task, no timer, no
message from the nodes (their idle streams are silent too).

Opening is done for all logs together: their placements in one read of the
epoch store and their tails with ``tail_lsns`` (one request per node per
4,096 logs), not one round trip per log.  So is reading placements again
when logs reach epochs their placement did not cover (``ReaderCore``'s
``wants_placement``): one read for all the logs that asked in a turn.

Memory is bounded by ``ClientSettings.read_buffer_bytes``: it is shared out
among the logs' node streams as their windows (what a node may send ahead
of delivery), with at least ``CREDIT_MIN`` records each.  The node's
``--read-streams-per-connection`` (16,384 by default) bounds how many logs
one client reads at once; past it, iterating raises OVERLOADED naming it.

A committed reader (``isolation="committed"``) passes each log's items
through the log's ``CommittedView``, which holds what an open transaction
may still abort.  Each log may hold its share of the budget (at least
``HOLD_MIN_BYTES``); past that its view spills, and once the spilled range
is decided the reader reads it again with a stream of its own, one batch a
round, while that log's other messages wait in its node streams' windows
(the other logs go on).

Nothing runs in the background, so leaving the loop early is safe; close the
reader (``async with``, or ``aclose``) so the nodes' streams stop.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..types import LSN_MAX, TAIL, Gap, Record, _Tail
from ._committed_view import HOLD_MAX_BYTES, CommittedView
from ._reader import INBOX_MAX, ReadStream, _objects

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..rpc import Links
    from ._admin import Admin

#: The fewest records a node may send one log's reader ahead of delivery.
CREDIT_MIN = 16
#: Records a node's window starts at, at most (the single-log reader's).
CREDIT_MAX = 8192
#: The payload of one node's window for one log, at most.
WINDOW_BYTES_MAX = 8 * 1024 * 1024
#: Bytes assumed per record until the reader has seen some.
RECORD_BYTES_GUESS = 1024
#: What a committed reader's view of one log holds at least before it spills.
HOLD_MIN_BYTES = 64 * 1024


@attrs.define(eq=False)
class _Slot:
    """One log's place in the mailbox: what its links ``send_nowait`` into."""

    mailbox: _Mailbox
    stream: ReadStream
    queued: int = 0
    closed: bool = False
    #: A committed reader's view of the log (None: uncommitted).
    view: CommittedView | None = None
    #: Reading a spilled range again: the log waits for it (``_reread``).
    again: ReadStream | None = None

    def send_nowait(self, value: Any, /) -> None:
        if self.closed:
            raise trio.BrokenResourceError
        if self.queued >= INBOX_MAX:
            raise trio.WouldBlock
        self.queued += 1
        self.mailbox.put(self, value)


@attrs.define(eq=False)
class _Mailbox:
    mail: collections.deque[tuple[_Slot, Any]] = attrs.Factory(collections.deque)
    arrived: trio.Event = attrs.Factory(trio.Event)

    def put(self, slot: _Slot, value: Any) -> None:
        self.mail.append((slot, value))
        self.arrived.set()


def windows(budget: int, logs: int, nodes: int) -> tuple[int, int]:
    """(first credit in records, window bytes) of one node's stream of one
    log, when ``logs`` logs of ``nodes`` nodes each share ``budget`` bytes."""
    share = budget // max(1, logs * nodes)
    window = max(1, min(WINDOW_BYTES_MAX, share))
    credit = max(CREDIT_MIN, min(CREDIT_MAX, window // RECORD_BYTES_GUESS))
    return credit, window


@attrs.define(eq=False)
class ManyReader:
    """``(log, Record | Gap)`` pairs from many logs as they arrive, each log
    in LSN order (see ``AsyncClient.read_many``)."""

    admin: Admin
    links: Links
    starts: dict[int, int]
    until: int | _Tail | None
    budget: int
    tails: Callable[[list[int]], Awaitable[dict[int, int]]]
    #: For a range's name: its logs and where to start (``Names.starts``).
    resolve: Callable[[], Awaitable[dict[int, int]]] | None = attrs.field(
        default=None, kw_only=True
    )
    #: "committed": committed records only (see the module docstring).
    isolation: str = attrs.field(default="uncommitted", kw_only=True)
    _mailbox: _Mailbox = attrs.field(init=False, factory=_Mailbox)
    _slots: dict[int, _Slot] = attrs.field(init=False, factory=dict)
    _out: collections.deque[tuple[int, Record | Gap]] = attrs.field(
        init=False, factory=collections.deque
    )
    #: (when, order, log): logs to turn even if nothing arrives.
    _timers: list[tuple[float, int, int]] = attrs.field(init=False, factory=list)
    _due: dict[int, float] = attrs.field(init=False, factory=dict)
    _order: itertools.count[int] = attrs.field(init=False, factory=itertools.count)
    #: Logs whose placement must be read again (a later epoch showed up).
    _placing: set[int] = attrs.field(init=False, factory=set)
    #: Logs reading a spilled range again.
    _rereading: set[int] = attrs.field(init=False, factory=set)
    _opened: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    _interrupted: bool = attrs.field(init=False, default=False)

    @property
    def open_logs(self) -> int:
        """Logs still being read (not yet at their end)."""
        return len(self._slots)

    # -- opening ---------------------------------------------------------------

    async def _open(self) -> None:
        self._opened = True
        if self.resolve is not None:
            self.starts = await self.resolve()
        logs = list(self.starts)
        if not logs:
            return
        placements = await self.admin.placements(logs)
        # The tails are the ends of a read to TAIL; and ``tail_lsns`` starts a
        # sequencer for each log whose copies lie above its release pointers,
        # which releases them (a single log's reader starts one in any case).
        tails = await self.tails(logs)
        widest = max(len(p.nodes) for p in placements.values())
        credit, window = windows(self.budget, len(logs), widest)
        hold = max(HOLD_MIN_BYTES, min(HOLD_MAX_BYTES, self.budget // len(logs)))
        now = trio.current_time()
        for log in logs:
            stream = ReadStream(
                self.admin,
                self.links,
                log,
                self.starts[log],
                self.until,
                credit=credit,
                window_bytes=window,
            )
            slot = self._slots[log] = _Slot(self._mailbox, stream)
            if self.isolation == "committed":
                slot.view = CommittedView(self.starts[log], hold)
            stream.inbox = slot
            if self.until is TAIL:
                until = tails[log]
            elif self.until is None:
                until = LSN_MAX
            else:
                assert isinstance(self.until, int)
                until = self.until
            stream.begin(placements[log], until)
        for log in logs:
            await self._turn(log, now)

    # -- the loop ----------------------------------------------------------------

    async def _turn(self, log: int, now: float) -> None:
        slot = self._slots.get(log)
        if slot is None or slot.again is not None:
            return  # (a log reading a spilled range again waits for it)
        stream = slot.stream
        core = stream.core
        assert core is not None
        await stream.reconnect(core, now)
        items = await stream.turn(core, now)
        if slot.view is not None:
            items = self._committed(slot, items, stream.finished(core))
        if items:
            self._out.extend((log, item) for item in _objects(items))
        if log in self._rereading:
            return  # turned again when the spilled range was read
        if stream.finished(core):
            await self._finish(log)
            return
        if stream.placement_wanted(core, now):
            self._placing.add(log)
        self._arm(log, stream.deadline(core, now))

    def _committed(self, slot: _Slot, items: list[Any], done: bool) -> list[Any]:
        """What a committed reader delivers of ``items``; a spilled range
        that is decided now starts being read again."""
        view = slot.view
        assert view is not None
        out = view.feed(items) if items else []
        if done:
            view.at_end()
        span = view.reread()
        if span is not None:
            stream = slot.stream
            slot.again = ReadStream(self.admin, self.links, stream.log_id, span[0], span[1])
            self._rereading.add(stream.log_id)
        return out

    async def _reread(self) -> None:
        """One batch of a spilled range read again, for one log; at its end
        the log goes on from where its own streams are."""
        log = min(self._rereading)
        slot = self._slots.get(log)
        again = None if slot is None else slot.again
        if again is None:
            self._rereading.discard(log)
            return
        assert slot is not None
        assert slot.view is not None
        items = await again._deliverable()
        if items:
            self._out.extend((log, item) for item in _objects(slot.view.decided(items)))
            return
        slot.again = None
        self._rereading.discard(log)
        await again.aclose()
        await self._turn(log, trio.current_time())

    async def _place(self, now: float) -> None:
        """Read the placements that logs asked for, all in one read of the
        epoch store (an epoch change often comes to many logs at once: their
        sequencers moved together), and turn those logs with them."""
        logs = [log for log in self._placing if log in self._slots]
        self._placing.clear()
        if not logs:
            return
        placements = await self.admin.placements(logs)
        for log in logs:
            stream = self._slots[log].stream
            assert stream.core is not None
            stream.follow(stream.core, placements[log], now)
            await self._turn(log, now)

    def _arm(self, log: int, when: float) -> None:
        if when == math.inf or self._due.get(log) == when:
            return
        self._due[log] = when
        heapq.heappush(self._timers, (when, next(self._order), log))

    def _expired(self, now: float) -> set[int]:
        due, timers = set(), self._timers
        while timers and timers[0][0] <= now:
            when, _, log = heapq.heappop(timers)
            if self._due.get(log) == when:
                del self._due[log]
                due.add(log)
        return due

    async def _round(self, deadline: float = math.inf) -> None:
        """Take what arrived, turn the logs it concerns and those whose
        timer came; wait first (until ``deadline`` at most) when there is
        neither."""
        if self._rereading:
            # A batch read again, then what arrived meanwhile, without waiting.
            await self._reread()
            deadline = trio.current_time()
        mailbox = self._mailbox
        if not mailbox.mail and not self._expired_soon():
            wake = min(self._timers[0][0] if self._timers else math.inf, deadline)
            with trio.move_on_at(wake):
                await mailbox.arrived.wait()
        mailbox.arrived = trio.Event()
        now = trio.current_time()
        touched = self._expired(now)
        mail, mailbox.mail = mailbox.mail, collections.deque()
        for slot, event in mail:
            slot.queued -= 1
            if not slot.closed:
                stream = slot.stream
                assert stream.core is not None
                stream.absorb(stream.core, event)
                touched.add(stream.log_id)
        for log in touched:
            await self._turn(log, now)
        await self._place(now)

    def _expired_soon(self) -> bool:
        return bool(self._timers) and self._timers[0][0] <= trio.current_time()

    async def _finish(self, log: int) -> None:
        slot = self._slots.pop(log, None)
        if slot is not None:
            slot.closed = True
            self._due.pop(log, None)
            self._rereading.discard(log)
            if slot.again is not None:
                await slot.again.aclose()
            await slot.stream.aclose()

    # -- the caller's side -------------------------------------------------------

    def __aiter__(self) -> ManyReader:
        return self

    async def __anext__(self) -> tuple[int, Record | Gap]:
        if not self._opened:
            await self._open()
        while not self._out:
            if self._closed or not self._slots:
                raise StopAsyncIteration
            await self._round()
        return self._out.popleft()

    async def next_pairs(
        self, limit: int = 10_000, *, deadline: float = math.inf
    ) -> list[tuple[int, Record | Gap]]:
        """Up to ``limit`` pairs that arrived (waits only until there is one);
        [] once every log reached its end, or when ``deadline`` (trio's
        clock) came first, or ``interrupt`` was called."""
        if not self._opened:
            await self._open()
        while not self._out:
            if self._closed or not self._slots or self._interrupted:
                self._interrupted = False
                return []
            if trio.current_time() >= deadline:
                return []
            await self._round(deadline)
        out = [self._out.popleft()]
        while self._out and len(out) < limit:
            out.append(self._out.popleft())
        return out

    def interrupt(self) -> None:
        """Have a ``next_pairs`` that waits (or the next) return [] now."""
        self._interrupted = True
        self._mailbox.arrived.set()

    async def aclose(self) -> None:
        """Stop every log's node streams."""
        if self._closed:
            return
        self._closed = True
        for log in list(self._slots):
            await self._finish(log)
        self._out.clear()

    async def __aenter__(self) -> ManyReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

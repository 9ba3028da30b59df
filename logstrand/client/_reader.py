"""The trio shell of a reader: node streams in, ``Record`` and ``Gap`` out.

It opens one stream per node of the log's nodesets (over the client's one
connection per node), feeds what arrives to the pure ``ReaderCore``, sends the
core's StartRead and credit messages, and hands delivered items to the caller.
A node that cannot be reached is reported to the core and tried again every
second.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from typing import TYPE_CHECKING, Any, Protocol, assert_never

import attrs
import trio

from ..errors import (
    AccessDeniedError,
    LogstrandError,
    NotAuthenticatedError,
    Status,
    TransientError,
)
from ..positions import last_lsn_of
from ..rebuilding import Authority
from ..types import LSN_MAX, TAIL, Gap, Record, _Tail, records_of
from ..wire import ReadCredit, StartRead, StopRead
from ._reader_core import (
    GapItem,
    GrantCredit,
    Item,
    ReaderCore,
    RecordRun,
    StartStream,
    StopStream,
)
from ._reader_intake import Verdict, absorb, access_gap
from ._tier_reads import TierReads
from ._views import without_markers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..rpc import Link, Links
    from ._admin import Admin, LogPlacement
    from ._columns import ColumnBatch

_log = logging.getLogger("logstrand.client")
#: Reads of the object store one turn makes at most before it returns.
TIER_STEPS_PER_TURN = 4
_stream_ids = itertools.count(1)
RECONNECT_S = 1.0
#: The soonest a reader reads its log's placement again.
PLACEMENT_RETRY_S = 1.0
#: Messages a reader's inbox holds; a node sends at most the credit it got,
#: so a full inbox means a broken node (its link is cut).
INBOX_MAX = 100_000


class Inbox(Protocol):
    """Where a link puts a read stream's messages: ``(node, ReadRecords)``,
    ``(node, None)`` when the link is gone.  Raises ``trio.WouldBlock`` when
    full, ``trio.BrokenResourceError`` when the reader is gone."""

    def send_nowait(self, value: Any, /) -> None: ...


def _objects(items: list[Item]) -> list[Record | Gap]:
    out: list[Record | Gap] = []
    for item in without_markers(items):
        if isinstance(item, RecordRun):
            out.extend(
                records_of(item.lsns, item.timestamps_ms, item.payloads, item.keys, item.extras)
            )
        else:
            out.append(Gap(item.type, item.lo, item.hi))
    return out


class ReadCursor(Protocol):
    """A consumer group's side of a reader (``positions._cursor.GroupCursor``)."""

    async def start(self) -> int: ...
    def delivered(self, lsn: int | None) -> None: ...
    async def next_requested(self) -> None: ...
    async def close(self) -> None: ...


@attrs.define(eq=False)
class ReadStream:
    """An async iterator over one log's records and gaps (see ``AsyncClient.read``)."""

    admin: Admin
    links: Links
    log_id: int
    start: int
    until_arg: int | _Tail | None
    single_copy: bool = attrs.field(default=True, kw_only=True)
    credit: int = attrs.field(default=8192, kw_only=True)
    #: Payload each node may send ahead of delivery (see ``ReaderCore``).
    window_bytes: int = attrs.field(default=8 * 1024 * 1024, kw_only=True)
    show_compacted: bool = attrs.field(default=False, kw_only=True)
    #: No permission to read: an ACCESS gap over the range (True), or
    #: ``AccessDeniedError`` (the default).
    access_gaps: bool = attrs.field(default=False, kw_only=True)
    #: A consumer group's cursor: the reader starts after the group's
    #: position and reports what it hands out (``positions._cursor.GroupCursor``).
    cursor: ReadCursor | None = attrs.field(default=None, kw_only=True)
    stream_id: int = attrs.field(init=False, factory=lambda: next(_stream_ids))
    core: ReaderCore | None = attrs.field(init=False, default=None)
    _links: dict[int, Link] = attrs.field(init=False, factory=dict)
    _pending: list[Record | Gap] = attrs.field(init=False, factory=list)
    _closed: bool = attrs.field(init=False, default=False)
    _denied: bool = attrs.field(init=False, default=False)
    _access_gap_sent: bool = attrs.field(init=False, default=False)
    _retry_at: dict[int, float] = attrs.field(init=False, factory=dict)
    #: When the log's placement was last read again (``follow``).
    _placed_at: float = attrs.field(init=False, default=-math.inf)
    _authority: Authority = attrs.field(init=False, factory=Authority)
    #: Where the links put this stream's messages: this stream's own channel,
    #: or a ``ManyReader``'s mailbox (which then drives the stream).
    inbox: Inbox | None = attrs.field(default=None, kw_only=True)
    _inbox: trio.MemoryReceiveChannel[Any] | None = attrs.field(init=False, default=None)
    #: The log's records in the object store (``_tier_reads``): those below
    #: its tiered point, read before the nodes' streams open (while
    #: ``_tier_first``), and the spans the nodes' local floors leave there.
    _tier: TierReads = attrs.field(init=False)
    _tier_first: bool = attrs.field(init=False, default=True)
    #: LSNs the nodes' streams left to the object store (their local
    #: floors: ``ReaderCore.take_tiered``), still to read; None: none.
    _tier_span: tuple[int, int] | None = attrs.field(init=False, default=None)
    _started: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        if self.inbox is None:
            self.inbox, self._inbox = trio.open_memory_channel[Any](INBOX_MAX)
        self._tier = TierReads(self.admin, self.links, self.log_id)

    def finished(self, core: ReaderCore) -> bool:
        """Is everything up to the read's end delivered?"""
        return core.done and self._tier_span is None

    @property
    def healthy(self) -> bool:
        """False while the reader waits for nodes it needs to decide about a gap."""
        return self.core is None or self.core.healthy

    async def _start(self) -> None:
        """Where the reader starts: its group's position, once."""
        if not self._started:
            self._started = True
            if self.cursor is not None:
                self.start = await self.cursor.start()

    async def _tiered(self) -> list[Item]:
        """The next items below the log's tiered point ([]: none left; the
        nodes' streams go on from ``start``)."""
        if not self._tier_first:
            return []
        await self._start()
        until = self.until_arg if isinstance(self.until_arg, int) else LSN_MAX
        got = await self._tier.first(self.start, until)
        if got is None:
            self._tier_first = False
            return []
        items, self.start, self._tier_first = got
        return items

    async def _open(self) -> ReaderCore:
        admin = self.admin
        await self._start()
        placement = await admin.placement(self.log_id)  # the one read of the epoch store
        nodes = placement.nodes
        if self.until_arg is TAIL:
            until = await admin.tail_lsn(self.log_id, nodes)
        else:
            # A running sequencer keeps the nodes' release pointers current.
            await admin.ensure_sequencer(self.log_id)
            if self.until_arg is None:
                until = LSN_MAX
            else:
                assert isinstance(self.until_arg, int)
                until = self.until_arg
        core = self.begin(placement, until)
        await self._act(core)
        return core

    def begin(self, placement: LogPlacement, until: int) -> ReaderCore:
        """The reader's core, reading ``placement``'s nodes up to ``until``
        (its first StartReads are among its actions)."""
        core = ReaderCore(
            self.log_id,
            self.start,
            until,
            placement.nodes,
            placement.replication,
            scd=self.single_copy,
            credit=self.credit,
            window_bytes=self.window_bytes,
            now=trio.current_time(),
            show_compacted=self.show_compacted,
            known_epoch=placement.known_epoch,
        )
        self._authority = self.admin.view.authority
        core.set_authority(self._authority.empty, self._authority.untrusted)
        self.core = core
        return core

    async def _link(self, node: int) -> Link:
        link = self._links.get(node)
        if link is not None and not link.closed:
            return link
        link = await self.links.get(node)
        assert self.inbox is not None
        link.streams[self.stream_id] = self.inbox
        self._links[node] = link
        return link

    async def _act(self, core: ReaderCore) -> None:
        actions, core.actions = core.actions, []
        now = trio.current_time()
        for a in actions:
            msg: StartRead | ReadCredit
            # The core's actions are a closed union (``_reader_parts.Action``).
            match a:
                case StopStream():
                    self._stop_on(a.node_id)
                    continue
                case StartStream():
                    msg = StartRead(
                        self.stream_id,
                        a.generation,
                        self.log_id,
                        a.start_lsn,
                        a.until_lsn,
                        a.credit,
                        a.scd,
                        a.known_down,
                    )
                case GrantCredit():
                    msg = ReadCredit(self.stream_id, a.generation, a.records)
                case _:
                    assert_never(a)
            try:
                link = await self._link(a.node_id)
                await link.send(msg)
            except TransientError:
                self._retry_at[a.node_id] = now + RECONNECT_S
                core.on_unreachable(a.node_id, now)
        if core.actions:
            await self._act(core)  # an unreachable node triggered a rewind

    async def next_runs(self) -> list[Item]:
        """The next records and gaps as the log holds them, in LSN order
        ([]: the end): ``RecordRun``s over the stored batches (transactions'
        markers included) and ``GapItem``s.  What the tiered storage's
        offload copies into objects."""
        return await self._next_items()

    async def _next_items(self) -> list[Item]:
        items = await self._deliverable()
        if self.cursor is not None:
            self.cursor.delivered(last_lsn_of(items))
        return items

    async def _deliverable(self) -> list[Item]:
        """What the stream delivers next ([]: the end): what the nodes'
        copies make, in LSN order; a committed reader filters it
        (``_committed``)."""
        return await self._next_core_items()

    async def _next_core_items(self) -> list[Item]:
        if self.cursor is not None:
            await self.cursor.next_requested()
        try:
            if self.core is None and self._tier_first:
                tiered = await self._tiered()
                if tiered:
                    return tiered
                if isinstance(self.until_arg, int) and self.start > self.until_arg:
                    return []  # the whole range was tiered
            core = self.core or await self._open()
        except NotAuthenticatedError:
            # The credentials, not a grant: no ACCESS gap, and not the advice
            # to grant 'read' (the fix is --ca and --token).
            raise
        except AccessDeniedError:
            return self._deny()
        while True:
            now = trio.current_time()
            items = await self.turn(core, now)
            if not items and self.placement_wanted(core, now):
                self.follow(core, await self.admin.placement(self.log_id), now)
                items = await self.turn(core, now)
            if items:
                return items
            if self.finished(core):
                return []
            await self._wait(core, now)

    async def turn(self, core: ReaderCore, now: float) -> list[Item]:
        """What can be delivered now; the StartReads and credit it calls for are sent."""
        if self._denied:  # a node said ACCESS (set by ``absorb``)
            return self._deny()
        authority = self.admin.view.authority
        if authority is not self._authority:
            self._authority = authority
            core.set_authority(authority.empty, authority.untrusted)
        out: list[Item] = []
        for _ in range(TIER_STEPS_PER_TURN):
            if self._tier_span is not None:
                out += await self._tier_turn()
                if self._tier_span is not None:
                    return out  # the rest at the next turn (``deadline``)
            # The core is polled after a span ends in the same turn: it may
            # hold what comes after it, and no message need come to say so.
            core.poll(now)
            out += core.items
            core.items = []
            self._tier_span = core.take_tiered()
            await self._act(core)
            if self._tier_span is None or out:
                break
        return out

    async def _tier_turn(self) -> list[Item]:
        assert self._tier_span is not None
        items, self._tier_span = await self._tier.span(*self._tier_span)
        return items

    def deadline(self, core: ReaderCore, now: float) -> float:
        """When this reader must take a turn even if nothing arrives."""
        if self._tier_span is not None:
            return now  # the rest of the span is read at the next turn
        deadline = core.next_deadline(now)
        if self._retry_at:
            deadline = min(deadline, min(self._retry_at.values()))
        if core.wants_placement:
            deadline = min(deadline, self._placed_at + PLACEMENT_RETRY_S)
        return deadline

    def placement_wanted(self, core: ReaderCore, now: float) -> bool:
        """Must the log's placement be read again now (a later epoch than it
        covered showed up; at most once per ``PLACEMENT_RETRY_S``)?"""
        return core.wants_placement and now >= self._placed_at + PLACEMENT_RETRY_S

    def follow(self, core: ReaderCore, placement: LogPlacement, now: float) -> None:
        """Read on with the log's placement as it is now (``placement_wanted``)."""
        self._placed_at = now
        core.set_placement(placement.nodes, placement.replication, placement.known_epoch, now)
        core.set_authority(self._authority.empty, self._authority.untrusted)

    def _stop_on(self, node: int) -> None:
        """The node left the log's placement: its stream stops."""
        self._retry_at.pop(node, None)
        link = self._links.pop(node, None)
        if link is not None:
            link.streams.pop(self.stream_id, None)
            link.send_nowait(StopRead(self.stream_id))

    def _deny(self) -> list[Item]:
        """No permission to read the log: one ACCESS gap over the rest of the
        range, and the stream ends (nothing of the log is delivered); or,
        unless the caller asked for such gaps, ``AccessDeniedError``."""
        self._denied = True
        if not self.access_gaps:
            raise AccessDeniedError(
                f"log {self.log_id}: this user may not read it (it needs a grant of "
                f"'read': logstrand acl grant USER --logs {self.log_id} --ops read)"
            )
        if self._access_gap_sent:
            return []
        self._access_gap_sent = True
        until = self.until_arg if isinstance(self.until_arg, int) else LSN_MAX
        return [access_gap(self.core, self.start, until)]

    async def _wait(self, core: ReaderCore, now: float) -> None:
        inbox = self._inbox
        assert inbox is not None
        with trio.move_on_at(self.deadline(core, now)):
            event = await inbox.receive()
            self.absorb(core, event)
            while True:
                try:
                    event = inbox.receive_nowait()
                except trio.WouldBlock:
                    break
                self.absorb(core, event)
        await self.reconnect(core, trio.current_time())

    async def reconnect(self, core: ReaderCore, now: float) -> None:
        """Try again the links to nodes whose time has come."""
        for node, at in list(self._retry_at.items()):
            if at <= now:
                try:
                    await self._link(node)
                except TransientError:
                    self._retry_at[node] = now + RECONNECT_S
                    continue
                del self._retry_at[node]
                core.on_reachable(node, now)

    def absorb(self, core: ReaderCore, event: tuple[int, Any]) -> None:
        node, msg = event
        now = trio.current_time()
        if msg is None:  # the connection to that node is gone
            self._links.pop(node, None)
            self._retry_at[node] = now + RECONNECT_S
            core.on_unreachable(node, now)
            return
        verdict = absorb(core, node, msg, now)
        if verdict is Verdict.DENIED:
            self._denied = True
        elif verdict is Verdict.NOT_FOUND:
            raise LogstrandError(f"log {self.log_id} does not exist", Status.NOTFOUND)
        elif verdict is Verdict.REFUSED:
            raise LogstrandError(
                f"node {node} refused a read stream of log {self.log_id}: this client "
                "has as many read streams open on it as one connection may have (the "
                "nodes' --read-streams-per-connection); read fewer logs at once",
                Status.OVERLOADED,
            )
        elif verdict is Verdict.RECONNECT:
            self._retry_at[node] = now + RECONNECT_S

    # -- iteration -------------------------------------------------------------

    async def batches(self) -> AsyncIterator[list[Item]]:
        """Delivered items a batch at a time: ``RecordRun`` columns and ``GapItem``."""
        while not self._closed:
            items = await self._next_items()
            if not items:
                return
            yield items

    def __aiter__(self) -> ReadStream:
        return self

    async def __anext__(self) -> Record | Gap:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            items = await self._next_items()
            if not items:
                raise StopAsyncIteration
            self._pending = _objects(items)
            self._pending.reverse()
        return self._pending.pop()

    async def next_objects(self, limit: int = 10_000) -> list[Record | Gap]:
        """Up to ``limit`` delivered items as objects; [] at the end."""
        if not self._pending:
            items = await self._next_items()
            self._pending = _objects(items)
            self._pending.reverse()
        out = self._pending[-limit:]
        del self._pending[-limit:]
        out.reverse()
        return out

    async def next_columns(self) -> ColumnBatch | None:
        """What was delivered since the last call, as one ``ColumnBatch``
        (records as columns, and the gaps); None at the end.  Waits only
        until something is there.  Do not mix with item iteration."""
        if self._closed:
            return None
        items = await self._next_items()
        if not items:
            return None
        from ._columns import ColumnBatch  # numpy: columnar reads only

        return ColumnBatch.of(self.log_id, items)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for link in self._links.values():
            link.streams.pop(self.stream_id, None)
            with contextlib.suppress(LogstrandError):
                link.send_nowait(StopRead(self.stream_id))
        self._links.clear()
        if self.cursor is not None:
            await self.cursor.close()

    async def __aenter__(self) -> ReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["GapItem", "ReadStream", "RecordRun"]

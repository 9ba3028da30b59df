"""A member of a group: ``client.subscribe(group, logs)``.

The member joins the group at its coordinator (the node that runs the
sequencer of the group's positions log) and reads the logs it is given,
as a Kafka consumer of ``group.protocol=consumer`` reads its partitions:

- **Heartbeats.**  A task of the client sends ``GroupHeartbeat`` every
  interval the coordinator names (a tenth of its session timeout), saying
  which logs the member reads; the answer names the logs to read from now
  on when that changes.  A member silent for a session is dropped and its
  logs go to the others.
- **A log taken away** is first no longer delivered: the reader over the
  member's logs is closed, and with ``autocommit`` what was processed of
  the log is committed.  Only then does the next heartbeat say the member
  no longer reads it, and only then may the coordinator give it to another
  member.  So no record of a log is delivered after its revocation is
  acknowledged.
- **A log given** is read from after the group's committed position (its
  oldest record when there is none); a log kept across a change, from
  after the last record handed out.
- **Processed** is what was handed out before the caller asked for more
  (Kafka's consumer commits, on its next poll, what the last one returned).
  With ``autocommit`` it is committed every ``autocommit_interval_s``, when
  a log is taken away, and when the member leaves.
- **Fenced** (the coordinator dropped the member: it was silent too long):
  the member's logs are lost to it without a commit, and it joins again.

Delivery is at least once: a member that dies after processing but before
committing is followed by one that reads those records again.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..errors import (
    AccessDeniedError,
    InvalidArgumentError,
    LogstrandError,
    Status,
    TransientError,
)
from ..positions import check_group
from ..records import positions_log_of
from ..types import LSN_MAX, LSN_OLDEST, Gap, Record
from ..wire import GROUPS_PROTOCOL, SUBSCRIBED_LOGS_MAX, GroupHeartbeat, GroupHeartbeatReply
from ._coordinators import CoordinatorClient, coordinator_node

if TYPE_CHECKING:
    from ._many import ManyReader
    from ._names import Names


class _Client(CoordinatorClient, Protocol):
    """What a member needs of its client (``AsyncClient``)."""

    nursery: trio.Nursery
    names: Names

    def read_many(
        self, starts: dict[int, int] | str, until: Any = ..., *, isolation: str = ...
    ) -> ManyReader: ...


_log = logging.getLogger("logstrand.client")
#: Kafka's error codes the member acts on (``kafka_errors``).
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
#: The wait before a heartbeat is tried again after a failure.
RETRY_S = 0.5
#: A reply later than this is a failure (then the heartbeat is sent again).
BEAT_TIMEOUT_S = 5.0


class Subscription:
    """``(log, Record | Gap)`` pairs of the logs this member is given (see
    the module docstring).  Make one with ``AsyncClient.subscribe``."""

    def __init__(
        self,
        client: _Client,
        group: str,
        logs: list[int] | tuple[int, ...] | range | str,
        *,
        autocommit: bool,
        instance_id: str | None,
        interval_s: float,
        isolation: str = "uncommitted",
    ) -> None:
        self.client = client
        self.group = group
        self._asked = logs
        self.autocommit = autocommit
        self.instance_id = instance_id
        self.interval_s = interval_s
        self.isolation = isolation
        #: The subscription, sorted; the coordinator's indexes are into it.
        self.logs: tuple[int, ...] = ()
        self.member_id = ""
        self.epoch = 0
        #: Indexes of the logs read now (what heartbeats say is owned).
        self._owned: frozenset[int] = frozenset()
        #: The latest assignment not yet taken up (None: none came).
        self._pending: frozenset[int] | None = None
        self._reader: ManyReader | None = None
        self._delivered: dict[int, int] = {}
        #: Log -> last LSN of the batch handed out last (processed once the
        #: next is asked for): per batch, not the whole ``_delivered`` map.
        self._last_batch: dict[int, int] = {}
        self._processed: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._last_commit = -math.inf
        self._changed = trio.Event()
        self._owned_told = True
        #: Set when what the member owns changed: the next heartbeat goes now.
        self._told = trio.Event()
        self._beats: trio.CancelScope | None = None
        self._failed: LogstrandError | None = None
        self._started = False
        self._closed = False
        self._heartbeat_s = 1.0
        self._coordinator: int | None = None

    @property
    def assigned(self) -> list[int]:
        """The logs this member reads now."""
        return sorted(self.logs[i] for i in self._owned)

    # -- starting and leaving ------------------------------------------------------

    async def start(self) -> None:
        """Join the group; heartbeats go on in the client's background.
        (Iterating starts a member not yet started.)"""
        if self._started:
            return
        self._started = True
        check_group(self.group)
        asked = self._asked
        if isinstance(asked, str):
            logs = tuple(sorted(await self.client.names.starts(asked)))
        else:
            logs = tuple(sorted(set(asked)))
        if not logs:
            raise InvalidArgumentError("subscribe needs at least one log")
        if len(logs) > SUBSCRIBED_LOGS_MAX:
            raise InvalidArgumentError(
                f"a member subscribes to {SUBSCRIBED_LOGS_MAX} logs at most, not {len(logs)}"
            )
        self.logs = logs
        await self.client.groups.ensure_log()  # the positions logs, made on first use
        await self._beat(subscribe=True)  # refusals (access, another group's logs) raise here
        self._last_commit = trio.current_time()
        self._beats = trio.CancelScope()
        self.client.nursery.start_soon(self._heartbeats)

    async def aclose(self) -> None:
        """Commit what was processed (``autocommit``), leave the group, stop reading."""
        if self._closed:
            return
        self._closed = True
        if self._beats is not None:
            self._beats.cancel()
        with trio.CancelScope(shield=True, deadline=trio.current_time() + BEAT_TIMEOUT_S):
            self._processed.update(self._delivered)
            if self.autocommit:
                await self._commit(self._owned)
            await self._close_reader()
            try:
                await self._send(-2 if self.instance_id else -1, subscribe=False)
            except LogstrandError as exc:
                _log.info("group %s: leaving: %s (the session ends it)", self.group, exc)

    async def __aenter__(self) -> Subscription:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- heartbeats ------------------------------------------------------------------

    async def _coordinator_node(self, again: bool) -> int:
        if self._coordinator is None or again:
            self._coordinator = await coordinator_node(
                self.client,
                positions_log_of(self.group),
                again=again,
                protocol=GROUPS_PROTOCOL,
                what=f"group {self.group}",
            )
        return self._coordinator

    async def _send(self, epoch: int, *, subscribe: bool) -> GroupHeartbeatReply:
        """One heartbeat to the coordinator, found again when the one known
        does not answer or says it is not (any more) the group's."""
        sent = self._owned
        owned = None if self._owned_told or subscribe else tuple(sorted(sent))

        def make(rid: int) -> GroupHeartbeat:
            logs = self.logs if subscribe else ()
            return GroupHeartbeat(
                rid, self.group, self.member_id, epoch, self.instance_id, subscribe, logs, owned
            )

        # A member waits for an answer a few heartbeats long at most, so
        # that it finds a new coordinator well within its session.
        timeout_s = min(BEAT_TIMEOUT_S, max(1.0, 3 * self._heartbeat_s))
        reply = None
        for attempt in range(2):
            try:
                node = await self._coordinator_node(again=attempt > 0)
                reply = await self.client.ask_node(node, make, timeout_s=timeout_s)
            except TransientError as exc:
                _log.info("group %s: coordinator: %s", self.group, exc)
                reply = None
            if reply is None:
                self._coordinator = None
                continue
            if reply.status == Status.ACCESS:
                raise AccessDeniedError(reply.message or "refused")
            if reply.status not in (Status.REDIRECTED, Status.AGAIN):
                break
        if reply is None:
            raise TransientError(f"group {self.group}: no coordinator answered", Status.TIMEDOUT)
        if reply.status == Status.INVALID_PARAM:
            raise InvalidArgumentError(reply.message or "refused")
        if reply.status != Status.OK:
            raise TransientError(reply.message or "heartbeat refused", Status(reply.status))
        if self._owned is sent:
            self._owned_told = True
        return reply  # type: ignore[no-any-return]

    async def _beat(self, *, subscribe: bool = False) -> None:
        """One heartbeat, and what its answer says to do."""
        join = self.epoch == 0
        reply = await self._send(self.epoch, subscribe=subscribe or join)
        if reply.error in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            _log.warning(
                "group %s: %s: the member's logs are lost, joining again", self.group, reply.message
            )
            if reply.error == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.epoch = 0
            self._lose_all()
            return
        if reply.error:
            raise InvalidArgumentError(f"group {self.group}: {reply.message}")
        self.member_id, self.epoch = reply.member_id, reply.epoch
        self._heartbeat_s = max(0.05, reply.heartbeat_ms / 1000)
        if reply.assigned is not None:
            given = frozenset(i for i in reply.assigned if i < len(self.logs))
            if given != self._owned or self._pending is not None:
                self._pending = given
                self._wake()

    def _lose_all(self) -> None:
        self._pending = frozenset()
        for log in [self.logs[i] for i in self._owned]:
            self._processed.pop(log, None)  # lost: no commit (another member has it)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        if self._reader is not None:
            self._reader.interrupt()

    async def _heartbeats(self) -> None:
        assert self._beats is not None
        with self._beats:
            while True:
                with trio.move_on_after(self._heartbeat_s):
                    await self._told.wait()
                self._told = trio.Event()
                try:
                    await self._beat()
                except TransientError as exc:
                    _log.info("group %s: heartbeat: %s", self.group, exc)
                    await trio.sleep(RETRY_S)
                except LogstrandError as exc:
                    self._failed = exc
                    self._wake()
                    return

    # -- reading ---------------------------------------------------------------------

    async def next_pairs(self, limit: int = 10_000) -> list[tuple[int, Record | Gap]]:
        """Up to ``limit`` pairs of the member's logs (waits for one).  What
        was handed out before counts as processed."""
        if not self._started:
            await self.start()
        self._processed.update(self._last_batch)
        self._last_batch = {}
        while True:
            if self._failed is not None:
                raise self._failed
            if self._closed:
                return []
            # While nothing comes, what was handed out is committed on time too.
            next_commit = self._last_commit + self.interval_s
            if self.autocommit and trio.current_time() >= next_commit:
                await self._commit(self._owned)
                next_commit = self._last_commit + self.interval_s
            if self._pending is not None:
                await self._take_up(self._pending)
            deadline = next_commit if self.autocommit else math.inf
            if self._reader is None:
                with trio.move_on_at(deadline):
                    await self._changed.wait()
                self._changed = trio.Event()
                continue
            pairs = await self._reader.next_pairs(limit, deadline=deadline)
            if self._pending is not None or not pairs:
                continue  # nothing yet, or read again from the logs given now
            last = self._last_batch
            for log, item in pairs:
                last[log] = item.lsn if isinstance(item, Record) else item.hi
            self._delivered.update(last)
            return pairs

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> tuple[int, Record | Gap]:
        # One pair at a time: each is processed once the next is asked for.
        pairs = await self.next_pairs(1)
        if not pairs:
            raise StopAsyncIteration
        return pairs[0]

    async def _take_up(self, given: frozenset[int]) -> None:
        """Read ``given`` from now on: stop reading what is taken away (and
        commit it), then tell the coordinator so."""
        self._pending = None
        self._changed = trio.Event()
        await self._close_reader()
        gone = self._owned - given
        if gone and self.autocommit:
            await self._commit(gone)
        for i in gone:
            for held in (self._delivered, self._processed, self._committed):
                held.pop(self.logs[i], None)
        # The group's positions in one read, for every log new to this member.
        fresh = [self.logs[i] for i in given if self.logs[i] not in self._delivered]
        positions = (
            {p.log_id: p.lsn for p in await self.client.groups.of_group(self.group)}
            if fresh
            else {}
        )
        starts = {}
        for i in sorted(given):
            log = self.logs[i]
            if log in self._delivered:
                starts[log] = min(self._delivered[log] + 1, LSN_MAX)
            elif log in positions:
                self._committed[log] = positions[log]
                starts[log] = min(positions[log] + 1, LSN_MAX)
            else:
                starts[log] = LSN_OLDEST
        self._owned = given
        self._owned_told = False
        self._told.set()
        if starts:
            self._reader = self.client.read_many(starts, None, isolation=self.isolation)
        _log.info("group %s: member %s reads logs %s", self.group, self.member_id, self.assigned)

    async def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.aclose()

    # -- commits -----------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit what was processed of the member's logs now."""
        self._processed.update(self._delivered)
        await self._commit(self._owned)

    async def _commit(self, indexes: frozenset[int]) -> None:
        """Commit the processed positions of these logs, all in one go."""
        self._last_commit = trio.current_time()
        due = {}
        for i in indexes:
            log = self.logs[i]
            lsn = self._processed.get(log)
            if lsn is not None and lsn != self._committed.get(log):
                due[log] = lsn
        if not due:
            return
        try:
            await self.client.groups.commit_many(
                self.group, [(log, lsn, None, None) for log, lsn in sorted(due.items())]
            )
        except LogstrandError as exc:
            # At least once: the next commit (or the next member) covers it.
            _log.warning("group %s: commit of %d logs failed: %s", self.group, len(due), exc)
            return
        self._committed.update(due)

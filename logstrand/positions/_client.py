"""Consumer groups in the client: positions committed to, and read back
from, the internal positions log (``_model`` says how it is laid out).

``Groups`` keeps a ``PositionTable`` of that log and brings it up to the
log's tail before it answers; a reader opened with ``group=`` finds where
to start, and commits as it goes, through the ``GroupCursor`` it makes
(``_cursor``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..epochstore import LogAttributes
from ..errors import (
    ExistsError,
    InvalidArgumentError,
    NotFoundError,
    Status,
    collapse,
)
from ..records import POSITIONS_LOG_ID, POSITIONS_LOGS, check_log_id
from ..types import Record, lsn_epoch
from ..wire import LogInfo
from ._cursor import GroupCursor
from ._model import (
    GroupLag,
    Position,
    PositionTable,
    check_group,
    encode_key,
    encode_value,
    epochs_to_walk,
    lag_of,
    membership_key,
    positions_log_of,
    reset_target,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from ..epochstore import EpochEnd, EpochStore


class Admin(Protocol):
    """The client's admin calls the positions need (``client._admin.Admin``)."""

    @property
    def view(self) -> Any: ...
    async def ask_nodes(
        self,
        log_id: int,
        make: Callable[[int], Any],
        *,
        timeout_s: float = ...,
        nodes: tuple[int, ...] | None = ...,
    ) -> dict[int, Any]: ...
    async def tail_lsn(self, log_id: int) -> int: ...
    async def log_attributes(self, log_id: int) -> LogAttributes: ...
    async def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None: ...
    async def find_time(self, log_id: int, timestamp_ms: int) -> int: ...


class Appender(Protocol):
    """The client's appends (``client._appender.Appender``)."""

    async def append(self, log_id: int, payload: bytes | None, key: bytes | None) -> int: ...
    async def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
    ) -> list[int]: ...


_log = logging.getLogger("logstrand.client")
#: The positions log keeps up to this many copies (fewer with fewer nodes:
#: one fewer than the storage nodes, so that a node down stops no commit).
POSITIONS_REPLICATION_MAX = 3
#: A reader looks this many batches past a group's position for the first
#: record, to tell how old it is (gaps come first after a trim).
FIRST_UNREAD_BATCHES_MAX = 4
#: How long a client that created the positions log waits for the nodes to know it.
LOG_KNOWN_WAIT_S = 10.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _create_positions_logs(store: EpochStore) -> None:
    """Create the positions logs that do not exist yet (compacted, replicated
    to up to three nodes): the first alone (a cluster of an earlier version
    has it), then the rest as one range; nothing for what another client
    created first."""
    storage = [n for n in store.nodes().values() if "storage" in n.roles]
    # One storage node fewer than there are, so that commits (and the group
    # coordinators that write them) go on with a node down.
    replication = max(1, min(POSITIONS_REPLICATION_MAX, len(storage) - 1))
    attributes = LogAttributes(replication_factor=replication, cleanup_policy="compact")
    for first, last in (
        (POSITIONS_LOG_ID, POSITIONS_LOG_ID),
        (POSITIONS_LOGS[1], POSITIONS_LOGS[-1]),
    ):
        with contextlib.suppress(ExistsError):
            store.create_logs(first, last, attributes)


class Groups:
    """The client's part of consumer groups (see the module docstring)."""

    def __init__(
        self,
        admin: Admin,
        appender: Appender,
        open_reader: Callable[[int, int, int], AbstractAsyncContextManager[Any]],
    ) -> None:
        self.admin = admin
        self.appender = appender
        #: ``open_reader(log, start, until)``: a read stream (``client._reader``).
        self.open_reader = open_reader
        #: Positions log -> its table.
        self.tables: dict[int, PositionTable] = {p: PositionTable() for p in POSITIONS_LOGS}
        self._refreshing = {p: trio.Lock() for p in POSITIONS_LOGS}
        #: Whether the first positions log was read for groups that lived
        #: there before there were several (``_legacy``).
        self._legacy_read = False

    # -- the positions log ------------------------------------------------------

    async def ensure_log(self) -> None:
        """Create the positions logs on first use."""
        view = self.admin.view
        if view.log_attributes(POSITIONS_LOGS[-1]) is not None:
            return
        await view.refresh()
        if view.log_attributes(POSITIONS_LOGS[-1]) is None:
            await view.astore.run(_create_positions_logs)
            await view.refresh()
            for log_id in POSITIONS_LOGS:
                await self._known_to_nodes(log_id)

    async def _known_to_nodes(self, log_id: int) -> None:
        """Wait (bounded) until the nodes have read the new log's configuration:
        a node reads it again at most every 0.2 s when asked of a log it lacks."""
        with trio.move_on_after(LOG_KNOWN_WAIT_S):
            while True:
                replies = await self.admin.ask_nodes(
                    log_id, lambda rid: LogInfo(rid, log_id), timeout_s=2.0
                )
                if replies and all(r.status == Status.OK for r in replies.values()):
                    return
                await trio.sleep(0.1)

    async def refresh(self, log_id: int = POSITIONS_LOG_ID) -> PositionTable:
        """Bring positions log ``log_id``'s table up to its tail (one reader
        at a time)."""
        await self.ensure_log()
        async with self._refreshing[log_id]:
            table = self.tables[log_id]
            tail = await self.admin.tail_lsn(log_id)
            if tail <= table.read_through:
                return table
            async with self.open_reader(log_id, table.read_through + 1, tail) as reader:
                while items := await reader.next_objects():
                    for item in items:
                        if isinstance(item, Record):
                            table.apply(item.lsn, item.key, item.payload)
                        else:
                            table.advance(item.hi)
            table.advance(tail)
            return table

    async def table_of(self, group: str) -> PositionTable:
        """The table of the positions log that holds ``group``, up to its tail."""
        return await self.refresh(positions_log_of(group))

    async def _legacy(self, group: str) -> list[Position]:
        """``group``'s positions in the first positions log, where every
        group's were before there were several: read there once per client,
        and shown where the group's own log has none for a log."""
        if positions_log_of(group) == POSITIONS_LOG_ID:
            return []
        if not self._legacy_read:
            await self.refresh(POSITIONS_LOG_ID)
            self._legacy_read = True
        return self.tables[POSITIONS_LOG_ID].of_group(group)

    # -- positions -----------------------------------------------------------------

    async def commit(self, group: str, log_id: int, lsn: int) -> int:
        """Record that ``group`` has processed ``log_id`` up to and including
        ``lsn``; returns the LSN of the record in the positions log."""
        key = encode_key(group, log_id)
        value = encode_value(lsn, _now_ms())
        await self.admin.log_attributes(log_id)  # NotFoundError for no such log
        await self.ensure_log()
        return await self.appender.append(positions_log_of(group), value, key)

    async def commit_many(
        self, group: str, entries: Sequence[tuple[int, int, int | None, str | None]]
    ) -> None:
        """Commit ``(log, lsn, kafka offset, metadata)`` of many logs at once:
        one batch of the positions log (a Kafka OffsetCommit)."""
        now = _now_ms()
        keys = [encode_key(group, log_id) for log_id, *_ in entries]
        values = [encode_value(lsn, now, off, md) for _, lsn, off, md in entries]
        await self.ensure_log()
        home = positions_log_of(group)
        # Each as an append of its own, all at once: the client's batcher
        # puts them in one batch of the positions log with whatever other
        # groups commit meanwhile, instead of a batch per request.  One (a
        # consumer of one partition, the usual commit) needs no nursery.
        if len(keys) == 1:
            await self.appender.append(home, values[0], keys[0])
            return
        try:
            async with trio.open_nursery() as nursery:
                for value, key in zip(values, keys, strict=True):
                    nursery.start_soon(self.appender.append, home, value, key)
        except BaseExceptionGroup as group:
            raise collapse(group) from None

    async def write_membership(self, group: str, payload: bytes | None) -> None:
        """Write (None: remove) the group's membership record (its coordinator's)."""
        await self.ensure_log()
        await self.appender.append(positions_log_of(group), payload, membership_key(group))

    async def committed(self, group: str, log_id: int) -> Position | None:
        check_group(group)
        check_log_id(log_id)
        found = (await self.table_of(group)).get(group, log_id)
        if found is None:
            found = next((p for p in await self._legacy(group) if p.log_id == log_id), None)
        return found

    async def positions(self, logs: Sequence[int] = POSITIONS_LOGS) -> dict[str, list[Position]]:
        """Every group and its positions (of the positions ``logs``)."""
        found: dict[str, dict[int, Position]] = {}
        for log_id in logs:
            for group, held in (await self.refresh(log_id)).groups().items():
                if positions_log_of(group) == log_id:
                    found.setdefault(group, {}).update((p.log_id, p) for p in held)
        if POSITIONS_LOG_ID in logs:  # what other logs' groups left in the first
            for group, held in self.tables[POSITIONS_LOG_ID].groups().items():
                mine = found.setdefault(group, {})
                for p in held:
                    mine.setdefault(p.log_id, p)
        return {g: sorted(ps.values(), key=lambda p: p.log_id) for g, ps in sorted(found.items())}

    async def transactions(self) -> dict[str, dict[str, Any]]:
        """Every transactional id's state as its coordinator wrote it, with
        the positions its open transaction holds for each of its groups
        (``held``), by id.  A record not read as JSON is skipped."""
        out: dict[str, dict[str, Any]] = {}
        tables = [await self.refresh(log_id) for log_id in POSITIONS_LOGS]
        for table in tables:  # all read first: a group's log may come after
            for txn_id, raw in table.txns.items():
                try:
                    doc = json.loads(raw)
                    held = {}
                    for group in doc.get("groups", ()):
                        record = self.tables[positions_log_of(group)].txn_positions.get(
                            (group, doc["pid"])
                        )
                        if record is not None:
                            held[group] = json.loads(record)["positions"]
                except (ValueError, KeyError, TypeError):
                    continue
                out[txn_id] = {**doc, "held": held}
        return dict(sorted(out.items()))

    async def transaction_state(self, txn_id: str) -> dict[str, Any] | None:
        """One transactional id's state as its coordinator wrote it (None:
        no such id): one positions log read, not all of them."""
        table = await self.refresh(positions_log_of(txn_id))
        raw = table.txns.get(txn_id)
        if raw is None:
            return None
        try:
            doc: dict[str, Any] = json.loads(raw)
        except ValueError:
            return None
        return doc

    async def of_group(self, group: str) -> list[Position]:
        check_group(group)
        own = {p.log_id: p for p in (await self.table_of(group)).of_group(group)}
        for p in await self._legacy(group):
            own.setdefault(p.log_id, p)
        return sorted(own.values(), key=lambda p: p.log_id)

    async def delete(self, group: str) -> list[int]:
        """Remove every position of ``group`` (tombstones); the logs it had."""
        positions = await self.of_group(group)
        member_record = group in self.tables[positions_log_of(group)].memberships
        if not positions and not member_record:
            raise NotFoundError(f"group {group!r} has no positions")
        await self.forget(group, [p.log_id for p in positions], membership=member_record)
        return [p.log_id for p in positions]

    async def membership(self, group: str) -> dict[str, Any] | None:
        """The group's membership record, as its coordinator last wrote it
        (``groups._model.snapshot``, or a consumer-protocol group's)."""
        check_group(group)
        record = (await self.table_of(group)).memberships.get(group)
        if record is None:
            return None
        try:
            doc: dict[str, Any] = json.loads(record)
        except ValueError:
            return None
        return doc

    async def forget(self, group: str, logs: Sequence[int], *, membership: bool = False) -> None:
        """Remove ``group``'s positions on ``logs`` (tombstones, in the
        first positions log too for what a group had there before)."""
        keys = [encode_key(group, log_id) for log_id in logs]
        if membership:
            keys.append(membership_key(group))
        home = positions_log_of(group)
        await self.appender.append_batch(home, [None] * len(keys), keys)
        legacy = {p.log_id for p in await self._legacy(group)} & set(logs)
        if legacy:
            old = [encode_key(group, log_id) for log_id in sorted(legacy)]
            await self.appender.append_batch(POSITIONS_LOG_ID, [None] * len(old), old)

    # -- lag ---------------------------------------------------------------------------

    async def lag(
        self, group: str, log_id: int, position: Position | None, tail: int | None = None
    ) -> GroupLag:
        """How far ``group`` is behind on ``log_id`` (``positions.GroupLag``);
        ``tail``: the log's tail, when the caller has it already."""
        admin = self.admin
        if tail is None:
            tail = await admin.tail_lsn(log_id)
        after = position.lsn if position is not None else 0
        ends: dict[int, EpochEnd | None] = {}
        if tail > after and lsn_epoch(tail) != lsn_epoch(after):
            for epoch in epochs_to_walk(after, tail):
                ends[epoch] = await admin.epoch_end(log_id, epoch)
        first_ms = await self._first_unread_ms(log_id, after, tail)
        return lag_of(position, tail, ends, first_ms, _now_ms(), group=group, log_id=log_id)

    async def _first_unread_ms(self, log_id: int, after: int, tail: int) -> int | None:
        if tail <= after:
            return None
        async with self.open_reader(log_id, after + 1, tail) as reader:
            for _ in range(FIRST_UNREAD_BATCHES_MAX):
                items = await reader.next_objects()
                if not items:
                    return None
                for item in items:
                    if isinstance(item, Record):
                        return item.timestamp
        return None

    async def lags(
        self, positions: Mapping[str, Sequence[Position]], tails: Mapping[int, int]
    ) -> dict[str, list[GroupLag]]:
        """The lag of each group on each log it has a position on, from
        positions already read (``positions``) and the logs' tails: what the
        groups monitor exports, without a read of a positions log and a
        ``tail_lsn`` per group and log."""
        return {
            group: [await self.lag(group, p.log_id, p, tails[p.log_id]) for p in held]
            for group, held in positions.items()
        }

    async def describe(self, group: str) -> list[GroupLag]:
        """The group's lag on each log it has a position on."""
        positions = await self.of_group(group)
        if not positions:
            raise NotFoundError(f"group {group!r} has no positions")
        return [await self.lag(group, p.log_id, p) for p in positions]

    async def reset(
        self, group: str, log_id: int, how: str, value: int | None, *, dry_run: bool
    ) -> tuple[int | None, int]:
        """Move ``group``'s position on ``log_id``: ``how`` is ``lsn`` (the
        next read starts at ``value``), ``time`` (at the first record at or
        after ``value`` ms), ``earliest`` or ``latest``.  Returns the committed
        LSN before (None: none) and after; ``dry_run`` changes nothing."""
        check_group(group)
        await self.admin.log_attributes(log_id)
        before = await self.committed(group, log_id)
        if how == "time":
            if value is None:
                raise InvalidArgumentError("a reset to a time needs the time")
            target = reset_target(how, found=await self.admin.find_time(log_id, value))
        elif how == "latest":
            target = reset_target(how, tail=await self.admin.tail_lsn(log_id))
        elif how in ("lsn", "earliest"):
            target = reset_target(how, lsn=value)
        else:
            raise InvalidArgumentError(f"unknown reset {how!r}")
        if not dry_run:
            await self.commit(group, log_id, target)
        return (None if before is None else before.lsn), target

    def cursor(
        self, group: str, log_id: int, *, autocommit: bool, interval_s: float
    ) -> GroupCursor:
        check_group(group)
        return GroupCursor(self, group, log_id, autocommit=autocommit, interval_s=interval_s)


__all__ = ["Groups"]

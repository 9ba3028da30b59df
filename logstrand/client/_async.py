"""The trio client: appends with coalescing, routing and retries.

Routing: the client computes, like the nodes, which live node runs a log's
sequencer (rendezvous hashing over the membership) and sends APPEND there.
A REDIRECTED answer names the right node; connection loss, a sequencer that
is moving (PREEMPTED, NOSEQUENCER) or overload are retried with backoff until
the append timeout.  What cannot succeed raises at once: NOTFOUND (unknown
log), TOOBIG, BADPAYLOAD, NOKEY.

Delivery is at least once: an APPEND whose answer was lost to a dropped
connection is sent again, and may then be stored twice.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import random
from typing import TYPE_CHECKING, Any

import trio

from ..epochstore import open_epoch_store
from ..errors import (
    ClosedError,
    InvalidArgumentError,
    LogstrandError,
    NotFoundError,
    Status,
    TransientError,
)
from ..logsdb import KEY_BYTES_MAX
from ..net import Connection, connect
from ..types import LSN_MAX, LSN_OLDEST, TAIL, Gap, Record, _Tail, format_lsn, validate_log_id
from ..view import ClusterView
from ..wire import (
    DIRECTORY_FIELDS,
    Append,
    AppendReply,
    Compact,
    FindTime,
    FindTimeReply,
    GetLogDirectory,
    GetNodeStatus,
    GetSeqState,
    LogInfo,
    LogInfoReply,
    NodeStatus,
    ReadRecords,
    RecordBatch,
    SeqState,
    Trim,
)
from ._columns import LogSegment
from ._reader import ReadStream, _objects
from ._settings import ClientSettings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

_log = logging.getLogger("logstrand.client")

_FATAL = {
    Status.TOOBIG: InvalidArgumentError,
    Status.INVALID_PARAM: InvalidArgumentError,
    Status.BADPAYLOAD: InvalidArgumentError,
    Status.NOKEY: InvalidArgumentError,
    Status.ACCESS: LogstrandError,
}


class _Waiter:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.reply: Any = None


class _NodeLink:
    """One connection to a node: requests waiting for answers, and read streams."""

    def __init__(self, conn: Connection, node_id: int) -> None:
        self.conn = conn
        self.node_id = node_id
        self.pending: dict[int, _Waiter] = {}
        self.streams: dict[int, trio.MemorySendChannel[Any]] = {}

    async def read(self) -> None:
        async def handle(msg: Any) -> None:
            if isinstance(msg, ReadRecords):
                inbox = self.streams.get(msg.stream_id)
                if inbox is not None:
                    # Never full: a node sends at most the credit it was given.
                    with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                        inbox.send_nowait((self.node_id, msg))
                return
            w = self.pending.pop(getattr(msg, "request_id", -1), None)
            if w is not None:
                w.reply = msg
                w.event.set()

        try:
            await self.conn.receive_messages(handle)
        finally:
            # The connection is gone: wake every waiter (reply None = retry)
            # and tell every reader.
            for w in self.pending.values():
                w.event.set()
            self.pending.clear()
            for inbox in self.streams.values():
                with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                    inbox.send_nowait((self.node_id, None))


class _Pending:
    __slots__ = ("error", "event", "lsn")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.lsn = 0
        self.error: BaseException | None = None


class _LogBatcher:
    """Coalesces concurrent appends to one log into few APPENDs."""

    def __init__(self, client: AsyncClient, log_id: int) -> None:
        self.client = client
        self.log_id = log_id
        self.payloads: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        self.waiters: list[_Pending] = []
        self.bytes = 0
        self.inflight = 0
        self.lingering = False

    async def add(self, payload: bytes | None, key: bytes | None) -> int:
        w = _Pending()
        self.payloads.append(payload)
        self.keys.append(key)
        self.waiters.append(w)
        self.bytes += len(payload) if payload else 0
        s = self.client.settings
        if self.inflight < s.inflight_batches_per_log and not self.lingering:
            if s.linger_ms > 0 and self.bytes < s.batch_bytes_max:
                self.lingering = True
                self.client.nursery.start_soon(self._linger)
            else:
                self._launch()
        await w.event.wait()
        if w.error is not None:
            raise w.error
        return w.lsn

    async def _linger(self) -> None:
        await trio.sleep(self.client.settings.linger_ms / 1000)
        self.lingering = False
        if self.waiters and self.inflight < self.client.settings.inflight_batches_per_log:
            self._launch()

    def _launch(self) -> None:
        s = self.client.settings
        n, size = 0, 0
        for p in self.payloads:
            if n >= s.batch_records_max or (n and size + (len(p) if p else 0) > s.batch_bytes_max):
                break
            n += 1
            size += len(p) if p else 0
        payloads, self.payloads = self.payloads[:n], self.payloads[n:]
        keys, self.keys = self.keys[:n], self.keys[n:]
        waiters, self.waiters = self.waiters[:n], self.waiters[n:]
        self.bytes -= size
        self.inflight += 1
        try:
            self.client.nursery.start_soon(self._send, payloads, keys, waiters)
        except RuntimeError:  # the client is closing: its nursery takes no new tasks
            self.inflight -= 1
            for w in waiters:
                w.error = ClosedError("client is closed")
                w.event.set()

    async def _send(
        self, payloads: list[bytes | None], keys: list[bytes | None], waiters: list[_Pending]
    ) -> None:
        try:
            first = await self.client._append_rpc(self.log_id, payloads, keys)
            for i, w in enumerate(waiters):
                w.lsn = first + i
        except LogstrandError as exc:
            for w in waiters:
                w.error = exc
        finally:
            self.inflight -= 1
            for w in waiters:
                w.event.set()
            if self.waiters and not self.lingering:
                self._launch()


class AsyncClient:
    """A logstrand client for trio code.  Make one with ``open_client(url)``."""

    def __init__(self, view: ClusterView, nursery: trio.Nursery, settings: ClientSettings) -> None:
        self.view = view
        self.nursery = nursery
        self.settings = settings
        self.cluster = view.store.cluster
        self._links: dict[int, _NodeLink] = {}
        self._link_locks: dict[int, trio.Lock] = {}
        self._batchers: dict[int, _LogBatcher] = {}
        self._hint: dict[int, int] = {}
        self._request_ids = itertools.count(1)

    # -- public API ---------------------------------------------------------

    async def append(self, log_id: int, payload: bytes | None, *, key: bytes | None = None) -> int:
        """Append one record; returns its LSN once R copies are stored.

        Concurrent calls for one log coalesce into few APPENDs.

        Raises:
            NotFoundError: the log does not exist.
            InvalidArgumentError: TOOBIG, BADPAYLOAD (None outside a compacted
                log), NOKEY (no key in a compacted log).
            TransientError: TIMEDOUT, or no sequencer could be reached in time.
        """
        await self._check(log_id, [payload], [key])
        batcher = self._batchers.get(log_id)
        if batcher is None:
            batcher = self._batchers[log_id] = _LogBatcher(self, log_id)
        return await batcher.add(payload, key)

    async def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
    ) -> list[int]:
        """Append many records in order; returns their LSNs (consecutive within each APPEND)."""
        if keys is not None and len(keys) != len(payloads):
            raise InvalidArgumentError("keys and payloads differ in length")
        key_list = list(keys) if keys is not None else [None] * len(payloads)
        await self._check(log_id, payloads, key_list)
        s = self.settings
        lsns: list[int] = []
        start = 0
        while start < len(payloads):
            end, size = start, 0
            while end < len(payloads) and end - start < s.batch_records_max:
                p = payloads[end]
                if end > start and size + (len(p) if p else 0) > s.batch_bytes_max:
                    break
                size += len(p) if p else 0
                end += 1
            first = await self._append_rpc(log_id, payloads[start:end], key_list[start:end])
            lsns.extend(range(first, first + end - start))
            start = end
        return lsns

    # -- internals ----------------------------------------------------------

    async def _check(
        self, log_id: int, payloads: Sequence[bytes | None], keys: Sequence[bytes | None]
    ) -> None:
        try:
            validate_log_id(log_id)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        limit = self.settings.payload_bytes_max
        for p in payloads:
            if p is not None and type(p) is not bytes:
                raise InvalidArgumentError(f"payload must be bytes or None, not {type(p).__name__}")
            if p is not None and len(p) > limit:
                raise InvalidArgumentError(
                    f"payload of {len(p)} bytes exceeds the limit of {limit}", Status.TOOBIG
                )
        for k in keys:
            if k is not None and type(k) is not bytes:
                raise InvalidArgumentError(f"key must be bytes or None, not {type(k).__name__}")
            if k is not None and len(k) > KEY_BYTES_MAX:
                raise InvalidArgumentError(
                    f"key of {len(k)} bytes exceeds the limit of {KEY_BYTES_MAX}", Status.TOOBIG
                )
        if self.view.log_attributes(log_id) is None:
            await self.view.refresh()
            if self.view.log_attributes(log_id) is None:
                raise NotFoundError(f"log {log_id} does not exist")

    async def _link(self, node_id: int) -> _NodeLink:
        link = self._links.get(node_id)
        if link is not None and not link.conn.closed:
            return link
        async with self._link_locks.setdefault(node_id, trio.Lock()):
            link = self._links.get(node_id)
            if link is not None and not link.conn.closed:
                return link
            cfg = self.view.nodes.get(node_id)
            if cfg is None:
                raise TransientError(f"node {node_id} is not configured", Status.CONNFAILED)
            conn = await connect(cfg.host, cfg.port, cluster=self.cluster)
            self.view.trust(node_id)
            link = self._links[node_id] = _NodeLink(conn, node_id)
            self.nursery.start_soon(conn.writer)
            self.nursery.start_soon(link.read)
            return link

    async def _append_rpc(
        self, log_id: int, payloads: Sequence[bytes | None], keys: Sequence[bytes | None]
    ) -> int:
        """One APPEND, retried until it succeeds, fails for good, or times out."""
        n = len(payloads)
        # ``_check`` has validated every key and payload: no second pass here.
        batch = RecordBatch.trusted((0,) * n, (0,) * n, (0,) * n, tuple(keys), tuple(payloads))
        deadline = trio.current_time() + self.settings.append_timeout_s
        backoff = 0.01
        last = "no attempt"
        with trio.move_on_at(deadline):
            while True:
                node = self._hint.get(log_id)
                if node is None or node not in self.view.alive:
                    node = self.view.sequencer_node(log_id)
                if node is None:
                    last = "no live node can run the sequencer"
                else:
                    reply, last = await self._try_append(node, log_id, batch)
                    if reply is not None:
                        status = Status(reply.status)
                        if status == Status.OK:
                            return reply.first_lsn
                        last = f"{status.name}: {reply.message}"
                        if status == Status.REDIRECTED and reply.redirect is not None:
                            if self._hint.get(log_id) != reply.redirect:
                                self._hint[log_id] = reply.redirect
                                continue
                        elif status == Status.NOTFOUND:
                            await self.view.refresh()
                            if self.view.log_attributes(log_id) is None:
                                raise NotFoundError(f"log {log_id} does not exist")
                        elif status in _FATAL:
                            raise _FATAL[status](reply.message, status)
                    else:
                        self._hint.pop(log_id, None)
                with contextlib.suppress(LogstrandError):
                    await self.view.refresh()
                await trio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 0.5)
        raise TransientError(
            f"append to log {log_id} timed out after {self.settings.append_timeout_s} s ({last})",
            Status.TIMEDOUT,
        )

    async def _try_append(
        self, node: int, log_id: int, batch: RecordBatch
    ) -> tuple[AppendReply | None, str]:
        rid = next(self._request_ids)
        waiter = _Waiter()
        link = None
        try:
            with trio.move_on_after(self.settings.append_attempt_timeout_s) as attempt:
                try:
                    link = await self._link(node)
                except TransientError as exc:
                    self.view.suspect(node)  # route around it until the lease tells
                    return None, str(exc)
                link.pending[rid] = waiter
                await link.conn.send(Append(rid, log_id, batch))
                await waiter.event.wait()
        finally:
            if link is not None:
                link.pending.pop(rid, None)
        if attempt.cancelled_caught:
            # A stopped or overloaded node: try again, maybe on another node.  The
            # first attempt may still succeed later (delivery is at least once).
            return None, f"node {node} did not answer in time"
        if waiter.reply is None:
            return None, f"connection to node {node} lost"
        assert isinstance(waiter.reply, AppendReply)
        return waiter.reply, ""

    # -- queries --------------------------------------------------------------

    async def _request(self, node: int, make: Any, timeout_s: float = 5.0) -> Any:
        """Send a request to one node and wait for its answer (None if none came)."""
        try:
            link = await self._link(node)
        except TransientError:
            return None
        rid = next(self._request_ids)
        waiter = _Waiter()
        link.pending[rid] = waiter
        try:
            with trio.move_on_after(timeout_s):
                await link.conn.send(make(rid))
                await waiter.event.wait()
        except TransientError:
            return None
        finally:
            link.pending.pop(rid, None)
        return waiter.reply

    async def _ask_nodeset(self, log_id: int, make: Any) -> list[Any]:
        """Ask every node that may hold the log; the answers that came."""
        nodes = await self._read_nodes(log_id)
        answers: list[Any] = []

        async def ask(node: int) -> None:
            reply = await self._request(node, make)
            if reply is not None and reply.status == Status.OK:
                answers.append(reply)

        async with trio.open_nursery() as nursery:
            for n in nodes:
                nursery.start_soon(ask, n)
        if not answers:
            raise TransientError(f"no node of log {log_id} answered", Status.TIMEDOUT)
        return answers

    async def _read_nodes(self, log_id: int) -> tuple[int, ...]:
        """Every node that holds or may hold copies of the log (all its nodesets)."""
        await self._require_log(log_id)
        epochs = await self.view.astore.call(self.view.store.log_epochs, log_id)
        nodes = {n for h in epochs.history for n in h.nodeset}
        if not nodes:
            nodes = set(self.view.storage_weights())
        return tuple(sorted(nodes))

    async def _require_log(self, log_id: int) -> None:
        try:
            validate_log_id(log_id)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        if self.view.log_attributes(log_id) is None:
            await self.view.refresh()
            if self.view.log_attributes(log_id) is None:
                raise NotFoundError(f"log {log_id} does not exist")

    async def log_info(self, log_id: int) -> list[LogInfoReply]:
        """What each answering node of the log knows of it."""
        return await self._ask_nodeset(log_id, lambda rid: LogInfo(rid, log_id))

    async def log_directory(self, log_id: int) -> list[LogSegment]:
        """The partition directories of the nodes that answered: what each of
        their partitions holds of the log (LSN range, timestamps, bytes,
        records), oldest first per node.  Every record is in R nodes' entries;
        planners use this to cut a log into ranges of similar size."""
        nodes = await self._read_nodes(log_id)
        out: list[LogSegment] = []

        async def ask(node: int) -> None:
            reply = await self._request(node, lambda rid: GetLogDirectory(rid, log_id))
            if reply is None or reply.status != Status.OK:
                return
            e = reply.entries
            for i in range(0, len(e), DIRECTORY_FIELDS):
                out.append(LogSegment(node, *e[i : i + DIRECTORY_FIELDS]))

        async with trio.open_nursery() as nursery:
            for n in nodes:
                nursery.start_soon(ask, n)
        return sorted(out, key=lambda s: (s.node_id, s.first_lsn))

    async def compact(self, log_id: int, *, timeout_s: float = 900.0) -> dict[str, Any]:
        """Run a compaction pass of a compacted log now, wait for it, and return
        its stats (``compaction.PassStats`` as a dict: the clean point before and
        after, records read and removed, keys, map size and fill, ...)."""
        await self._require_log(log_id)
        owner = self.view.sequencer_node(log_id)
        if owner is None:
            raise TransientError(f"no node can run log {log_id}'s cleaner", Status.NOSEQUENCER)
        reply = await self._request(owner, lambda rid: Compact(rid, log_id), timeout_s=timeout_s)
        if reply is None:
            raise TransientError(f"log {log_id}: no answer to COMPACT", Status.TIMEDOUT)
        stats: dict[str, Any] = json.loads(reply.stats_json)
        if reply.status != Status.OK:
            status = Status(reply.status)
            if status == Status.NOTFOUND:
                raise NotFoundError(stats.get("error", f"log {log_id} does not exist"))
            raise LogstrandError(stats.get("error", status.name), status)
        return stats

    async def compaction_state(self, log_id: int) -> dict[str, Any] | None:
        """The log's compaction state from the epoch store (None: never compacted)."""
        await self._require_log(log_id)
        state: dict[str, Any] | None = await self.view.astore.call(
            self.view.store.compaction, log_id
        )
        return state

    async def tail_lsn(self, log_id: int) -> int:
        """An LSN at or above every acknowledged and released append (0: none yet).

        Makes sure the log has a sequencer first (as LogDevice's GET_SEQ_STATE
        does): a newly activated one brings the nodes' release pointers up to date.
        """
        acked = await self.ensure_sequencer(log_id)
        infos = await self.log_info(log_id)
        # Right after a restart the nodes' release pointers can lag behind what
        # was acknowledged in earlier epochs (they are persisted lazily), and a
        # new sequencer knows only its own epoch: every stored copy counts too
        # (recovery releases or plugs each of them soon).
        return max([acked, *(r.release_lsn for r in infos), *(r.last_lsn for r in infos)])

    async def ensure_sequencer(self, log_id: int) -> int:
        """Have the log's owner node activate its sequencer, if none runs.

        Returns the sequencer's acknowledged tail (0 if it did not answer).
        """
        state = await self.sequencer_state(log_id)
        return state.tail_lsn if state is not None and state.status == Status.OK else 0

    async def sequencer_state(self, log_id: int) -> SeqState | None:
        """The log's sequencer as its node sees it (activating one if none
        runs): tail, epoch, and how the recovery of earlier epochs stands.
        None when no node answered.
        """
        await self._require_log(log_id)
        # A dead owner that the membership does not know of yet is routed
        # around, as appends do: otherwise no sequencer would come up to
        # release (or recover) what the dead one left, and a reader up to the
        # tail would wait for it.
        for _ in range(3):
            owner = self.view.sequencer_node(log_id)
            if owner is None:
                return None
            reply = await self._request(owner, lambda rid: GetSeqState(rid, log_id))
            if isinstance(reply, SeqState):
                return reply  # OK, or e.g. REDIRECTED: it answered
            self.view.suspect(owner)
        return None

    async def trim_point(self, log_id: int) -> int:
        """The log's trim point: records at or below it are gone (0: never trimmed)."""
        return max(r.trim_point for r in await self.log_info(log_id))

    async def trim(self, log_id: int, lsn: int) -> int:
        """Trim the log up to ``lsn``: records at or below it go, readers see TRIM.

        The trim point is recorded in the epoch store first (a node that is down
        now applies it when it comes back), then sent to every node of all the
        log's nodesets.  Returns the log's trim point afterwards.

        Raises:
            InvalidArgumentError: ``lsn`` is past the log's tail (nothing above
                the tail exists to trim, and a later record must not be).
            NotFoundError: the log does not exist.
        """
        await self._require_log(log_id)
        if not 0 <= lsn <= LSN_MAX:
            raise InvalidArgumentError(f"LSN {lsn} is out of range")
        tail = await self.tail_lsn(log_id)
        if lsn > tail:
            raise InvalidArgumentError(
                f"cannot trim log {log_id} to {format_lsn(lsn)}: its tail is {format_lsn(tail)}"
            )
        view = self.view
        point = await view.astore.call(view.store.set_trim_point, log_id, lsn)
        nodes = await self._read_nodes(log_id)

        async def tell(node: int) -> None:
            await self._request(node, lambda rid: Trim(rid, log_id, point))

        async with trio.open_nursery() as nursery:
            for n in nodes:
                if n in view.alive:
                    nursery.start_soon(tell, n)
        return int(point)

    async def node_status(self, node_id: int) -> NodeStatus | None:
        """One node's state (None when it does not answer)."""
        reply = await self._request(node_id, GetNodeStatus)
        return reply if isinstance(reply, NodeStatus) and reply.status == Status.OK else None

    async def is_empty(self, log_id: int) -> bool:
        """True when no record is left above the trim point."""
        return all(r.records == 0 for r in await self.log_info(log_id))

    async def data_size(self, log_id: int) -> int:
        """Approximate bytes of the log's records (one copy of each)."""
        infos = await self.log_info(log_id)
        attrs_ = self.view.log_attributes(log_id)
        copies = attrs_.replication_factor if attrs_ is not None else 1
        return sum(r.bytes for r in infos) // max(1, copies)

    async def find_time(self, log_id: int, timestamp_ms: int) -> int:
        """The first LSN with a timestamp at or after ``timestamp_ms``.

        With no record that recent, the LSN after the tail.
        """
        if timestamp_ms < 0:
            raise InvalidArgumentError("timestamp must not be negative")
        answers = await self._ask_nodeset(log_id, lambda rid: FindTime(rid, log_id, timestamp_ms))
        found = [r.lsn for r in answers if isinstance(r, FindTimeReply) and r.lsn]
        if found:
            return min(found)
        return await self.tail_lsn(log_id) + 1

    def read(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        *,
        single_copy: bool = True,
        show_compacted: bool = False,
    ) -> ReadStream:
        """Read a log in LSN order: an async iterator of ``Record`` and ``Gap``.

        ``until``: an LSN (included), ``TAIL`` (the tail when reading starts)
        or None (follow the log forever).  Use it as a context manager so the
        node streams stop when you are done::

            async with client.read(log) as reader:
                async for item in reader:
                    ...
        """
        return ReadStream(
            self, log_id, start, until, single_copy=single_copy, show_compacted=show_compacted
        )

    async def read_many(
        self,
        starts: dict[int, int],
        until: int | _Tail | None = TAIL,
        *,
        buffer: int = 64,
    ) -> AsyncIterator[tuple[int, Record | Gap]]:
        """Read several logs at once: ``(log, item)`` pairs, each log in LSN order."""
        send, recv = trio.open_memory_channel[tuple[int, Any]](buffer)

        async def pump(out: trio.MemorySendChannel[Any], log_id: int, start: int) -> None:
            async with out, self.read(log_id, start, until) as reader:
                async for batch in reader.batches():
                    for item in _objects(batch):
                        await out.send((log_id, item))

        async with trio.open_nursery() as nursery:
            async with send:
                for log_id, start in starts.items():
                    # Clone here, before ``send`` closes: each pump closes its own.
                    nursery.start_soon(pump, send.clone(), log_id, start)
            async with recv:
                async for pair in recv:
                    yield pair

    async def aclose(self) -> None:
        for link in self._links.values():
            await link.conn.aclose()


@contextlib.asynccontextmanager
async def open_client(
    url: str, *, settings: ClientSettings | None = None
) -> AsyncIterator[AsyncClient]:
    """A client for trio code::

    async with logstrand.open_client("sqlite:///tmp/c/cluster.db") as client:
        lsn = await client.append(1, b"hello")
    """
    store = await trio.to_thread.run_sync(open_epoch_store, url)
    try:
        view = ClusterView(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(view.run)
            client = AsyncClient(view, nursery, settings or ClientSettings())
            try:
                yield client
            finally:
                await client.aclose()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(store.close)

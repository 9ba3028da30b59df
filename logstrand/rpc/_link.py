"""Links to nodes: one connection each, requests matched to their replies.

Theory of operation
-------------------
A ``Link`` owns one ``net.Connection`` and two tasks: the connection's
writer, and a reader that sorts what arrives:

* a read-stream message (``ReadRecords``) goes to the inbox registered for
  its stream id (a reader's memory channel);
* a reply whose ``request_id`` a caller waits for wakes that caller;
* anything else goes to the link's ``on_message`` handler (a node's STORE
  replies, say), or is dropped when there is none.

When the connection ends, every waiting caller wakes with no reply, and every
inbox gets ``(node_id, None)``, so readers and requests never wait on a dead
link.  ``Links`` makes links on first use, one per node, under a per-node lock
(so concurrent callers share one connection), suspects a node it cannot reach
and trusts one it reached.  ``Waiters`` is the matching of ids to callers,
also used for what is matched by other ids (a recovery's STORE replies).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import trio

from ..errors import AccessDeniedError, LogstrandError, Status, TransientError
from ..net import connect
from ..wire import ErrorReply, ReadRecords

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Iterator

    from ..net import Connection
    from ..security import Credentials
    from ._view import ClusterView

K = TypeVar("K")
_log = logging.getLogger("logstrand.rpc")


class _Slot:
    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.value: Any = None


class Waiters(Generic[K]):
    """Callers waiting for a value by key (a request id, a store id)."""

    def __init__(self) -> None:
        self._slots: dict[K, _Slot] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def expect(self, key: K) -> _Slot:
        """Register before sending, so that a fast reply is not missed."""
        assert key not in self._slots, f"key {key!r} waited for twice"
        slot = self._slots[key] = _Slot()
        return slot

    async def wait(self, key: K, slot: _Slot, timeout_s: float) -> Any:
        """The value given to ``resolve``, or None at the timeout or ``fail_all``."""
        try:
            with trio.move_on_after(timeout_s):
                await slot.event.wait()
        finally:
            self._slots.pop(key, None)
        return slot.value

    def resolve(self, key: K, value: Any) -> bool:
        """Hand ``value`` to whoever waits for ``key``; False when nobody does."""
        slot = self._slots.pop(key, None)
        if slot is None:
            return False
        slot.value = value
        slot.event.set()
        return True

    def forget(self, key: K) -> None:
        """Stop waiting for ``key`` (its value, if any came, is in its slot)."""
        self._slots.pop(key, None)

    def fail_all(self) -> None:
        """Wake every waiter with None (its link is gone)."""
        slots, self._slots = self._slots, {}
        for slot in slots.values():
            slot.event.set()


class Link:
    """One connection to one node (see the module docstring)."""

    def __init__(
        self,
        conn: Connection,
        node_id: int,
        *,
        on_message: Callable[[Link, Any], Awaitable[None]] | None = None,
    ) -> None:
        self.conn = conn
        self.node_id = node_id
        self.on_message = on_message
        self.waiters: Waiters[int] = Waiters()
        #: stream id -> the reader's inbox of (node_id, ReadRecords | None):
        #: anything with ``send_nowait`` that raises as a trio channel does.
        self.streams: dict[int, Any] = {}

    @property
    def closed(self) -> bool:
        return self.conn.closed

    async def send(self, msg: Any) -> None:
        """Queue a message.  Raises ``TransientError(PEER_CLOSED)`` once the link is gone."""
        await self.conn.send(msg)

    def send_nowait(self, msg: Any) -> bool:
        """Queue a message if there is room now; False when full or gone."""
        return self.conn.send_nowait(msg)

    async def request(self, msg: Any, request_id: int, timeout_s: float) -> Any:
        """Send ``msg`` (whose request id is ``request_id``) and wait for its
        reply; None when none came in time or the link went."""
        slot = self.waiters.expect(request_id)
        try:
            await self.conn.send(msg)
        except TransientError:
            self.waiters.resolve(request_id, None)
            return None
        return await self.waiters.wait(request_id, slot, timeout_s)

    async def request_or_give_up(
        self,
        msg: Any,
        request_id: int,
        give_up: Callable[[], Awaitable[None]],
        patience_s: float,
    ) -> tuple[Any, bool]:
        """Send ``msg`` and wait for its reply; once none came in
        ``patience_s``, wait for either the reply or ``give_up()`` to return.
        Returns (the reply or None, whether it gave up).  The quick answer
        costs no more than ``request``: the watch starts only when it is slow."""
        waiters = self.waiters
        slot = waiters.expect(request_id)
        gave_up = False
        try:
            try:
                await self.conn.send(msg)
            except TransientError:
                return None, False
            with trio.move_on_after(patience_s):
                await slot.event.wait()
            if not slot.event.is_set():
                async with trio.open_nursery() as nursery:

                    async def reply() -> None:
                        await slot.event.wait()
                        nursery.cancel_scope.cancel()

                    async def watch() -> None:
                        nonlocal gave_up
                        await give_up()
                        gave_up = True
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(reply)
                    nursery.start_soon(watch)
        finally:
            waiters.forget(request_id)
        return slot.value, gave_up

    async def run(self) -> None:
        """Read until the connection ends; then wake everyone waiting on it."""

        async def handle(msg: Any) -> None:
            if isinstance(msg, ReadRecords):
                inbox = self.streams.get(msg.stream_id)
                if inbox is not None:
                    try:
                        inbox.send_nowait((self.node_id, msg))
                    except trio.WouldBlock:
                        # A node sends at most the credit it was given: this one
                        # is broken.  Cut it; its streams rewind to other nodes.
                        self.conn.cut(f"node {self.node_id} sent past a read stream's credit")
                    except trio.BrokenResourceError:
                        pass  # the reader closed that stream meanwhile
                return
            request_id = getattr(msg, "request_id", None)
            if request_id is not None and self.waiters.resolve(request_id, msg):
                return
            if self.on_message is not None:
                await self.on_message(self, msg)

        try:
            await self.conn.receive_messages(handle)
        finally:
            self.waiters.fail_all()
            for inbox in self.streams.values():
                with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                    inbox.send_nowait((self.node_id, None))


@attrs.define(eq=False)
class Links:
    """This process's links to the nodes of the cluster (see the module docstring).

    ``node_id``: this process's node id in the handshake (None for a client).
    """

    view: ClusterView
    nursery: trio.Nursery
    node_id: int | None = attrs.field(default=None, kw_only=True)
    on_message: Callable[[Link, Any], Awaitable[None]] | None = attrs.field(
        default=None, kw_only=True
    )
    #: TLS and token (None: a cluster without TLS).
    credentials: Credentials | None = attrs.field(default=None, kw_only=True)
    _links: dict[int, Link] = attrs.field(init=False, factory=dict)
    _locks: dict[int, trio.Lock] = attrs.field(init=False, factory=dict)
    _request_ids: Iterator[int] = attrs.field(init=False, factory=lambda: itertools.count(1))

    def next_request_id(self) -> int:
        return next(self._request_ids)

    def reachable(self) -> set[int]:
        """The nodes with an open link now."""
        return {n for n, link in self._links.items() if not link.closed}

    def open_link(self, node_id: int) -> Link | None:
        """The link to ``node_id`` if one is open now (no connecting)."""
        link = self._links.get(node_id)
        return None if link is None or link.closed else link

    async def get(self, node_id: int) -> Link:
        """The link to ``node_id``, connecting if there is none.

        Raises:
            TransientError: CONNFAILED (the node is then suspected for a while).
        """
        link = self._links.get(node_id)
        if link is not None and not link.closed:
            return link
        async with self._locks.setdefault(node_id, trio.Lock()):
            link = self._links.get(node_id)
            if link is not None and not link.closed:
                return link
            cfg = self.view.nodes.get(node_id)
            if cfg is None:
                raise TransientError(f"node {node_id} is not configured", Status.CONNFAILED)
            try:
                conn = await connect(
                    cfg.host,
                    cfg.port,
                    cluster=self.view.cluster,
                    node_id=self.node_id,
                    credentials=self.credentials,
                )
            except TransientError:
                self.view.suspect(node_id)
                raise
            except AccessDeniedError as exc:
                self.view.suspect(node_id)
                if self.node_id is None:
                    raise  # a client: its credentials are wrong, say so
                # A node refused by another (a certificate the other does not
                # take yet): route around it, as if it were down.
                _log.error("node %d: %s", self.node_id, exc)
                raise TransientError(str(exc), Status.CONNFAILED) from None
            self.view.trust(node_id)
            link = Link(conn, node_id, on_message=self.on_message)
            try:
                self.nursery.start_soon(conn.writer)
                self.nursery.start_soon(link.run)
            except RuntimeError:  # the nursery is closing: this process is shutting down
                await conn.aclose()  # (started neither: the socket would leak)
                raise TransientError(
                    f"node {node_id}: the links are closing", Status.CONNFAILED
                ) from None
            self._links[node_id] = link
            return link

    async def connected(self, node_id: int) -> Link | None:
        """The link to ``node_id``, or None when it cannot be reached now."""
        try:
            return await self.get(node_id)
        except TransientError:
            return None

    async def request(
        self, node_id: int, make: Callable[[int], Any], timeout_s: float = 5.0
    ) -> Any:
        """Send ``make(request_id)`` to a node and wait for the reply (None:
        unreachable, no answer in time, or the link went).

        Raises:
            AccessDeniedError: (a client) the node refused: no permission.
        """
        reply = await self._request(node_id, make, timeout_s)
        self.check_access(reply)
        return reply

    async def _request(self, node_id: int, make: Callable[[int], Any], timeout_s: float) -> Any:
        link = await self.connected(node_id)
        if link is None:
            return None
        rid = self.next_request_id()
        return await link.request(make(rid), rid, timeout_s)

    def check_access(self, reply: Any) -> None:
        if self.node_id is None and isinstance(reply, ErrorReply) and reply.status == Status.ACCESS:
            raise AccessDeniedError(reply.message)

    async def ask(
        self, nodes: Iterable[int], make: Callable[[int], Any], timeout_s: float = 5.0
    ) -> dict[int, Any]:
        """The same request to several nodes at once: ``{node: reply}`` for
        those that answered."""
        replies: dict[int, Any] = {}
        errors: list[LogstrandError] = []

        async def one(node_id: int) -> None:
            try:
                reply = await self._request(node_id, make, timeout_s)
            except LogstrandError as exc:  # refused our credentials: said once, below
                errors.append(exc)
                return
            if reply is not None:
                replies[node_id] = reply

        async with trio.open_nursery() as nursery:
            for n in nodes:
                nursery.start_soon(one, n)
        if errors:
            raise errors[0]
        for reply in replies.values():
            self.check_access(reply)
        return replies

    async def aclose(self) -> None:
        for link in self._links.values():
            await link.conn.aclose()

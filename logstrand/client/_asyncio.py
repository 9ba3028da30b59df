"""The client for asyncio code: ``AsyncClient``'s methods, awaited on the
asyncio loop, carried out by one client's trio thread.

There is one implementation of the client (``AsyncClient``, on trio); this is
its face for asyncio, as ``Client`` is its face for blocking code.  A call
starts on the client's thread without waiting for it (``Client.submit``) and
the asyncio task awaits the result (``asyncio.wrap_future``): the loop is
never blocked, and many appends in flight cost one scheduling each.  Reads
cross a batch of items at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, Unpack, overload

from ..errors import InvalidArgumentError
from ..types import LSN_OLDEST, TAIL, Gap, Record, _Tail
from ._async import AsyncClient
from ._forward import Forward
from ._sync import Client

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

    from ..security import Credentials
    from ._many import ManyReader
    from ._options import ManyOptions, ReadOptions, SubscribeOptions
    from ._reader import ReadStream
    from ._settings import ClientSettings
    from ._transaction import Transaction

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class _Source(Protocol):
    async def aclose(self) -> None: ...


async def _objects_of(stream: ReadStream) -> list[Record | Gap]:
    return await stream.next_objects()


async def _pairs_of(reader: ManyReader) -> list[tuple[int, Record | Gap]]:
    return await reader.next_pairs()


class _awaited(Forward[P, R]):
    """``AsyncioClient``'s twin of an ``AsyncClient`` method: the same
    signature and docstring, awaited on the asyncio loop."""

    @overload
    def __get__(self, client: None, owner: type) -> _awaited[P, R]: ...
    @overload
    def __get__(self, client: AsyncioClient, owner: type) -> Callable[P, Awaitable[R]]: ...
    def __get__(
        self, client: AsyncioClient | None, owner: type
    ) -> _awaited[P, R] | Callable[P, Awaitable[R]]:
        if client is None:
            return self
        method = self.method

        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return await client.run(lambda c: method(c, *args, **kwargs))

        return self.keep(client, call)  # type: ignore[no-any-return]


class AsyncioClient:
    """A logstrand client for asyncio.  Make one with ``logstrand.open_client``
    under asyncio (or ``open_asyncio_client``)."""

    def __init__(self, blocking: Client) -> None:
        self.blocking = blocking

    async def run(self, call: Callable[[AsyncClient], Awaitable[R]]) -> R:
        """Await ``call(async_client)`` carried out on the client's trio thread."""
        return await asyncio.wrap_future(self.blocking.submit(call))

    append = _awaited(AsyncClient.append)
    append_batch = _awaited(AsyncClient.append_batch)
    append_arrow = _awaited(AsyncClient.append_arrow)
    log_of = _awaited(AsyncClient.log_of)

    def read(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ReadOptions],
    ) -> AsyncioReadStream[Record | Gap]:
        """Read a log in LSN order: an async iterator of ``Record`` and ``Gap``
        (see ``AsyncClient.read``; ``options`` as ``ReadOptions`` says); use
        it as a context manager so the node streams stop when you are done."""

        def make(c: AsyncClient) -> ReadStream:
            return c.read(log_id, start, until, **options)

        return AsyncioReadStream(self, make, _objects_of)

    def read_many(
        self,
        starts: dict[int, int] | str,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ManyOptions],
    ) -> AsyncioReadStream[tuple[int, Record | Gap]]:
        """Read many logs at once: an async iterator of ``(log, item)`` pairs
        (see ``AsyncClient.read_many``); use it as a context manager so the
        node streams stop when you are done."""
        return AsyncioReadStream(
            self,
            lambda c: c.read_many(starts, until, **options),
            _pairs_of,
        )

    def subscribe(
        self,
        group: str,
        logs: list[int] | tuple[int, ...] | range | str,
        **options: Unpack[SubscribeOptions],
    ) -> AsyncioSubscription:
        """Join ``group`` and read the logs it gives this member: an async
        iterator of ``(log, item)`` pairs (see ``AsyncClient.subscribe``);
        use it as a context manager so that the member leaves when done."""
        return AsyncioSubscription(
            self,
            lambda c: c.subscribe(group, logs, **options),
            _pairs_of,
        )

    def transaction(self, transactional_id: str, *, timeout_s: float = 60.0) -> AsyncioTransaction:
        """A transaction of ``transactional_id`` (see ``AsyncClient.transaction``)::

        async with client.transaction("billing-1") as tx:
            await tx.append(orders, b"...")
        """
        return AsyncioTransaction(
            self, lambda c: c.transaction(transactional_id, timeout_s=timeout_s)
        )

    commit = _awaited(AsyncClient.commit)
    committed = _awaited(AsyncClient.committed)
    group_positions = _awaited(AsyncClient.group_positions)
    transactions = _awaited(AsyncClient.transactions)
    abort_transaction = _awaited(AsyncClient.abort_transaction)
    transaction_state = _awaited(AsyncClient.transaction_state)
    commit_prepared = _awaited(AsyncClient.commit_prepared)
    abort_prepared = _awaited(AsyncClient.abort_prepared)
    group_membership = _awaited(AsyncClient.group_membership)
    describe_group = _awaited(AsyncClient.describe_group)
    group_lags = _awaited(AsyncClient.group_lags)
    reset_group = _awaited(AsyncClient.reset_group)
    delete_group = _awaited(AsyncClient.delete_group)
    compact = _awaited(AsyncClient.compact)
    compaction_state = _awaited(AsyncClient.compaction_state)
    log_directory = _awaited(AsyncClient.log_directory)
    log_attributes = _awaited(AsyncClient.log_attributes)
    placement = _awaited(AsyncClient.placement)
    epoch_end = _awaited(AsyncClient.epoch_end)
    append_numbered = _awaited(AsyncClient.append_numbered)
    allocate_producer_id = _awaited(AsyncClient.allocate_producer_id)
    ensure_sequencer = _awaited(AsyncClient.ensure_sequencer)
    sequencer_state = _awaited(AsyncClient.sequencer_state)
    tail_lsn = _awaited(AsyncClient.tail_lsn)
    tail_lsns = _awaited(AsyncClient.tail_lsns)
    rebalance = _awaited(AsyncClient.rebalance)
    trim_point = _awaited(AsyncClient.trim_point)
    find_time = _awaited(AsyncClient.find_time)
    is_empty = _awaited(AsyncClient.is_empty)
    data_size = _awaited(AsyncClient.data_size)
    trim = _awaited(AsyncClient.trim)
    node_status = _awaited(AsyncClient.node_status)
    log_info = _awaited(AsyncClient.log_info)
    ask_nodes = _awaited(AsyncClient.ask_nodes)
    ask_node = _awaited(AsyncClient.ask_node)
    tell_nodes = _awaited(AsyncClient.tell_nodes)

    def sequencer_node(self, log_id: int) -> int | None:
        """The live node that runs the log's sequencer, as this client sees it."""
        return self.blocking.sequencer_node(log_id)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.blocking.close)


class AsyncioReadStream(Generic[T]):
    """Records and gaps for asyncio (see ``AsyncioClient.read`` and
    ``read_many``), crossing from the client's thread in batches."""

    def __init__(
        self,
        client: AsyncioClient,
        make: Callable[[AsyncClient], _Source],
        take: Callable[[Any], Awaitable[list[T]]],
    ) -> None:
        self._client = client
        self._make = make
        self._take = take
        self._source: _Source | None = None
        self._items: deque[T] = deque()
        self._done = False

    def __aiter__(self) -> AsyncioReadStream[T]:
        return self

    async def __anext__(self) -> T:
        while not self._items:
            if self._done:
                raise StopAsyncIteration
            batch = await self._client.run(self._next)
            if not batch:
                await self.aclose()
                raise StopAsyncIteration
            self._items.extend(batch)
        return self._items.popleft()

    async def _next(self, client: AsyncClient) -> list[T]:
        if self._source is None:
            self._source = self._make(client)
        return await self._take(self._source)

    async def aclose(self) -> None:
        """Stop the node streams (iterating to the end does it too)."""
        if self._done:
            return
        self._done = True
        source = self._source
        if source is not None:
            await self._client.run(lambda _c: source.aclose())

    async def __aenter__(self) -> AsyncioReadStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncioSubscription(AsyncioReadStream[tuple[int, Record | Gap]]):
    """A member of a group for asyncio (``AsyncioClient.subscribe``)."""

    @property
    def assigned(self) -> list[int]:
        """The logs this member reads now (none before the first item is asked for)."""
        source = self._source
        if source is None:
            return []
        # The member lives on the client's thread, but replaces its owned
        # logs (a frozenset) whole, never changes them in place: read as is.
        assigned: list[int] = source.assigned  # type: ignore[attr-defined]
        return assigned


@contextlib.asynccontextmanager
async def open_asyncio_client(
    url: str, settings: ClientSettings | None = None, credentials: Credentials | None = None
) -> AsyncIterator[AsyncioClient]:
    """An ``AsyncioClient`` until the block ends (its thread is started and
    joined off the loop)."""
    blocking = await asyncio.to_thread(
        functools.partial(Client, url, settings=settings, credentials=credentials)
    )
    client = AsyncioClient(blocking)
    try:
        yield client
    finally:
        await client.aclose()


class AsyncioTransaction:
    """A transaction for asyncio (``AsyncioClient.transaction``): each step
    carried out by the client's trio thread."""

    def __init__(self, client: AsyncioClient, make: Callable[[AsyncClient], Transaction]) -> None:
        self._client = client
        self._make = make
        self._tx: Transaction | None = None

    async def __aenter__(self) -> AsyncioTransaction:
        self._tx = await self._client.run(lambda c: self._make(c).__aenter__())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        tx = self._opened()
        await self._client.run(lambda c: tx.__aexit__(*exc))

    def _opened(self) -> Transaction:
        if self._tx is None:
            raise InvalidArgumentError("use the transaction in 'async with'")
        return self._tx

    @property
    def producer(self) -> tuple[int, int]:
        return self._opened().producer

    async def append(self, log_id: int, payload: bytes | None, *, key: bytes | None = None) -> int:
        tx = self._opened()
        return await self._client.run(lambda c: tx.append(log_id, payload, key=key))

    async def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
    ) -> int:
        tx = self._opened()
        return await self._client.run(lambda c: tx.append_batch(log_id, payloads, keys=keys))

    async def commit_positions(self, group: str, positions: Mapping[int, int]) -> None:
        tx = self._opened()
        await self._client.run(lambda c: tx.commit_positions(group, positions))

    async def commit(self) -> None:
        tx = self._opened()
        await self._client.run(lambda c: tx.commit())

    async def abort(self) -> None:
        tx = self._opened()
        await self._client.run(lambda c: tx.abort())

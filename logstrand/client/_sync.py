"""The blocking client: trio runs on a background thread.

Each call crosses into that thread (tens of microseconds), so for throughput
from ordinary code use ``append_batch`` or ``append_async``, which returns a
``concurrent.futures.Future`` at once and lets many appends coalesce.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, Unpack

import trio

from .. import _trace
from ..batch import pack_extra
from ..errors import ClosedError, InvalidArgumentError, LogstrandError, Status, collapse
from ..records import KEY_BYTES_MAX, LOG_ID_MAX
from ._accumulator import Accumulator, cost
from ._async import AsyncClient, open_trio_client, resolve_connection
from ._delivery import Delivery, Waiters
from ._forward import _blocking
from ._settings import ClientSettings, check_record
from ._sync_reads import BlockingReads
from ._sync_txn import BlockingTransaction

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from ..batch import Header
    from ..security import Credentials
    from ._options import ConnectOptions

P = ParamSpec("P")
R = TypeVar("R")


class Client(BlockingReads):
    """A blocking logstrand client.  Make one with ``logstrand.connect(url)``."""

    def __init__(
        self,
        url: str,
        *,
        settings: ClientSettings | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.url = url
        self._settings = settings
        self._credentials = credentials
        self._ready = threading.Event()
        self._errors: list[BaseException] = []  # set by the trio thread
        self._client: AsyncClient | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        s = settings or ClientSettings()
        self._append_wait_s = s.append_timeout_s + 30.0
        #: Records appended from any thread wait here for the client's loop.
        self._accumulator = Accumulator(s.buffer_bytes_max, s.max_block_ms / 1000, self._wake)
        self._waiters = Waiters(self._accumulator)
        self._payload_max = s.payload_bytes_max
        self._thread = threading.Thread(target=self._run, name="logstrand-client", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._errors:
            self._thread.join()
            raise self._errors[0]

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the constructor or to close()
            self._errors.append(exc)
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with open_trio_client(self.url, self._settings, self._credentials) as client:
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()
            # Closing: what was accepted and never sent fails now.
            closed = ClosedError("client is closed")
            self._fail_accumulated(closed)
            client._appender.fail_waiting(closed)

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._client is None or self._token is None or self._stop is None:
            raise ClosedError("client is closed")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise ClosedError("client is closed") from None
        except BaseExceptionGroup as group:  # concurrent work inside: one error
            error = collapse(group)
        except (trio.Cancelled, RuntimeError) as exc:
            error = exc
        if self._closing():  # the client closed under a call of another thread
            raise ClosedError("client is closed") from error
        raise error

    def _closing(self) -> bool:
        """Has ``close`` begun?"""
        return self._stop is None

    def append(
        self,
        log_id: int | str,
        payload: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
    ) -> int:
        """Append one record and wait for its LSN (see ``AsyncClient.append``;
        ``log_id`` may name a range).  Threads appending at once share
        APPENDs: the record waits in the producer's buffer with theirs
        (``append_async``)."""
        if _trace.ON:
            _trace.mark("client.call")
        if isinstance(log_id, str):
            log_id = self._named(log_id, key)
        self._check(log_id, payload, key)
        extra = self._extra(headers) if headers else None
        size = cost(payload, key, extra)
        waiter = self._waiters.get(size)
        self._accumulator.add(log_id, payload, key, waiter, size, extra)
        lsn = self._waiters.outcome(waiter, self._append_wait_s)
        if _trace.ON:
            _trace.mark("client.return")
        return lsn

    append_batch = _blocking(AsyncClient.append_batch)
    append_arrow = _blocking(AsyncClient.append_arrow)
    log_of = _blocking(AsyncClient.log_of)

    def _named(self, name: str, key: bytes | None) -> int:
        """The log of range ``name`` for ``key`` (``AsyncClient.log_of``),
        without a trip to the client's thread when its view knows the name."""
        client = self._client
        if client is None:
            raise ClosedError("client is closed")
        log = client.names.log_for(name, key)
        return log if log is not None else self.log_of(name, key=key)

    def append_async(
        self,
        log_id: int | str,
        payload: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        on_delivery: Callable[[int, BaseException | None], None] | None = None,
    ) -> concurrent.futures.Future[int]:
        """Start an append and return at once; the future gets the LSN or the
        error, and ``on_delivery(lsn, error)`` is called too (on the client's
        thread: keep it short).  The record waits in the producer's buffer
        with others (docs/write-path.md); when the buffer is full this waits
        up to ``max_block_ms`` for room, then raises ``BufferFullError``.
        ``headers``: (name, value) pairs kept with the record.

        Raises:
            InvalidArgumentError: a bad log id, or a key or payload no node takes.
            ClosedError: the client is closed.
        """
        if isinstance(log_id, str):
            log_id = self._named(log_id, key)
        self._check(log_id, payload, key)
        extra = self._extra(headers) if headers else None
        size = cost(payload, key, extra)
        fut = Delivery(self._accumulator, size, on_delivery)
        self._accumulator.add(log_id, payload, key, fut, size, extra)
        return fut

    def _extra(self, headers: Sequence[Header]) -> bytes | None:
        """The record's headers packed (``batch.pack_extra``), checked."""
        extra = pack_extra(None, headers)
        if extra is not None and len(extra) > self._payload_max:
            raise InvalidArgumentError(
                f"headers of {len(extra)} bytes exceed the limit of {self._payload_max}",
                Status.TOOBIG,
            )
        return extra

    def _check(self, log_id: int, payload: bytes | None, key: bytes | None) -> None:
        if self._client is None:
            raise ClosedError("client is closed")
        if not (
            type(log_id) is int
            and 0 < log_id <= LOG_ID_MAX
            and type(payload) is bytes
            and len(payload) <= self._payload_max
            and (key is None or (type(key) is bytes and len(key) <= KEY_BYTES_MAX))
        ):  # the common case passes above; the rest is checked and explained here
            check_record(log_id, payload, key, self._payload_max)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every record accepted so far is acknowledged or failed;
        the number still outstanding when ``timeout`` (seconds) ran out."""
        self._accumulator.flush(timeout)
        return self._accumulator.pending()

    def _wake(self) -> None:
        """The first record after a drain: one wake-up of the client's loop."""
        token = self._token
        try:
            if token is None:
                raise trio.RunFinishedError
            token.run_sync_soon(self._hand_over)
        except trio.RunFinishedError:
            self._fail_accumulated(ClosedError("client is closed"))

    def _hand_over(self) -> None:
        """On the client's loop: hand what the threads appended to the batchers."""
        client = self._client
        if client is None:
            self._fail_accumulated(ClosedError("client is closed"))
            return
        if _trace.ON:
            _trace.mark("client.loop")
        appender = client._appender
        for log_id, (payloads, keys, tickets, extras) in self._accumulator.take().items():
            appender.enqueue(log_id, payloads, keys, tickets, extras)

    def _fail_accumulated(self, error: LogstrandError) -> None:
        for _payloads, _keys, tickets, _extras in self._accumulator.take().values():
            for ticket in tickets:
                ticket.finish(0, error)

    def submit(self, call: Callable[[AsyncClient], Awaitable[R]]) -> concurrent.futures.Future[R]:
        """Start ``call(async_client)`` on the client's trio thread and return
        at once, without waiting for that thread; the future gets its result
        or its error (one error, not a group).  What the asyncio client and
        ``append_async`` are made of."""
        client = self._client
        if client is None or self._token is None:
            raise ClosedError("client is closed")
        fut: concurrent.futures.Future[R] = concurrent.futures.Future()

        async def run() -> None:
            try:
                fut.set_result(await call(client))
            except BaseExceptionGroup as group:  # concurrent work inside: one error
                fut.set_exception(collapse(group))
            except BaseException as exc:  # handed to the future's owner
                fut.set_exception(exc)

        try:
            self._token.run_sync_soon(client.nursery.start_soon, run)
        except trio.RunFinishedError:
            raise ClosedError("client is closed") from None
        return fut

    # Everything else is ``AsyncClient``'s, waited for (see ``_blocking``).
    commit = _blocking(AsyncClient.commit)
    committed = _blocking(AsyncClient.committed)
    group_positions = _blocking(AsyncClient.group_positions)
    transactions = _blocking(AsyncClient.transactions)
    abort_transaction = _blocking(AsyncClient.abort_transaction)
    transaction_state = _blocking(AsyncClient.transaction_state)
    commit_prepared = _blocking(AsyncClient.commit_prepared)
    abort_prepared = _blocking(AsyncClient.abort_prepared)
    group_membership = _blocking(AsyncClient.group_membership)
    describe_group = _blocking(AsyncClient.describe_group)
    group_lags = _blocking(AsyncClient.group_lags)
    reset_group = _blocking(AsyncClient.reset_group)
    delete_group = _blocking(AsyncClient.delete_group)
    compact = _blocking(AsyncClient.compact)
    compaction_state = _blocking(AsyncClient.compaction_state)
    log_directory = _blocking(AsyncClient.log_directory)
    log_attributes = _blocking(AsyncClient.log_attributes)
    placement = _blocking(AsyncClient.placement)
    epoch_end = _blocking(AsyncClient.epoch_end)
    append_numbered = _blocking(AsyncClient.append_numbered)
    allocate_producer_id = _blocking(AsyncClient.allocate_producer_id)
    ensure_sequencer = _blocking(AsyncClient.ensure_sequencer)
    sequencer_state = _blocking(AsyncClient.sequencer_state)
    tail_lsn = _blocking(AsyncClient.tail_lsn)
    tail_lsns = _blocking(AsyncClient.tail_lsns)
    rebalance = _blocking(AsyncClient.rebalance)
    trim_point = _blocking(AsyncClient.trim_point)
    find_time = _blocking(AsyncClient.find_time)
    is_empty = _blocking(AsyncClient.is_empty)
    data_size = _blocking(AsyncClient.data_size)
    trim = _blocking(AsyncClient.trim)
    node_status = _blocking(AsyncClient.node_status)
    log_info = _blocking(AsyncClient.log_info)
    ask_nodes = _blocking(AsyncClient.ask_nodes)
    ask_node = _blocking(AsyncClient.ask_node)
    tell_nodes = _blocking(AsyncClient.tell_nodes)

    def transaction(self, transactional_id: str, *, timeout_s: float = 60.0) -> BlockingTransaction:
        """A transaction of ``transactional_id`` (see ``AsyncClient.transaction``)::

        with client.transaction("billing-1") as tx:
            tx.append(orders, b"...")
        """
        return BlockingTransaction(self._call, self.async_client, transactional_id, timeout_s)

    def sequencer_node(self, log_id: int) -> int | None:
        """The live node that runs the log's sequencer, as this client sees it."""
        return self.async_client.sequencer_node(log_id)

    @property
    def async_client(self) -> AsyncClient:
        if self._client is None:
            raise ClosedError("client is closed")
        return self._client

    def close(self, timeout: float | None = None) -> None:
        """Deliver what was accepted (waiting up to ``timeout`` seconds, by
        default the append timeout), then stop; what is left fails with
        ``ClosedError``."""
        if self._stop is not None and self._token is not None:
            self._accumulator.flush(self._append_wait_s if timeout is None else timeout)
            stop = self._stop
            self._stop = None
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
            self._thread.join()
            self._client = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str | None = None, **options: Unpack[ConnectOptions]) -> Client:
    """A blocking client::

        with logstrand.connect("sqlite:///tmp/c/cluster.db") as client:
            lsn = client.append(1, b"hello")

    ``url``: the cluster's epoch store; without it, ``LOGSTRAND_URL``.
    ``options``: ``settings``, and for a cluster with TLS the credentials
    (``token``, ``ca``, ``cert``, ``key`` or ``credentials``), as
    ``ConnectOptions`` says; what is not passed comes from the environment.

    Raises:
        InvalidArgumentError: no URL, or credentials that do not fit together,
            or an unknown option.
        AccessDeniedError: (on first use) the nodes do not accept the credentials.
    """
    url, settings, credentials = resolve_connection(url, options)
    return Client(url, settings=settings, credentials=credentials)

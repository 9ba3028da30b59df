"""The blocking client: trio runs on a background thread.

Each call crosses into that thread (tens of microseconds), so for throughput
from ordinary code use ``append_batch`` or ``append_async``, which returns a
``concurrent.futures.Future`` at once and lets many appends coalesce.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from typing import TYPE_CHECKING, Any

import trio

from ..errors import ClosedError, collapse
from ..security import Credentials
from ..types import LSN_OLDEST, TAIL, Gap, Record, _Tail
from ._async import AsyncClient, open_client

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import pyarrow as pa

    from ..epochstore import EpochEnd, LogAttributes
    from ..positions import GroupLag, Position
    from ..wire import LogInfoReply, NodeStatus, SeqState
    from ._columns import ColumnBatch
    from ._settings import ClientSettings
    from ._views import LogSegment


class Client:
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
        async with open_client(
            self.url, settings=self._settings, credentials=self._credentials
        ) as client:
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._client is None or self._token is None or self._stop is None:
            raise ClosedError("client is closed")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise ClosedError("client is closed") from None
        except BaseExceptionGroup as group:  # concurrent work inside: one error
            raise collapse(group) from None

    def append(self, log_id: int, payload: bytes | None, *, key: bytes | None = None) -> int:
        """Append one record and wait for its LSN.  Raises as ``AsyncClient.append``."""
        assert self._client is not None
        client = self._client
        return int(self._call(lambda: client.append(log_id, payload, key=key)))

    def append_batch(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
    ) -> list[int]:
        assert self._client is not None
        client = self._client
        return list(self._call(lambda: client.append_batch(log_id, payloads, keys=keys)))

    def append_async(
        self, log_id: int, payload: bytes | None, *, key: bytes | None = None
    ) -> concurrent.futures.Future[int]:
        """Start an append and return at once; the future gets the LSN or the error."""
        client = self._client
        if client is None or self._token is None:
            raise ClosedError("client is closed")
        fut: concurrent.futures.Future[int] = concurrent.futures.Future()

        async def run() -> None:
            try:
                fut.set_result(await client.append(log_id, payload, key=key))
            except BaseException as exc:  # handed to the future's owner
                fut.set_exception(exc)

        try:
            trio.from_thread.run_sync(client.nursery.start_soon, run, trio_token=self._token)
        except trio.RunFinishedError:
            raise ClosedError("client is closed") from None
        return fut

    def read(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        *,
        single_copy: bool = True,
        show_compacted: bool = False,
        group: str | None = None,
        autocommit: bool = False,
    ) -> Iterator[Record | Gap]:
        """Read a log in LSN order: ``Record`` and ``Gap`` items (see ``AsyncClient.read``).

        Items cross from the client's trio thread in batches.  Close the
        generator (or finish it) to stop the node streams.  ``group`` and
        ``autocommit``: start after the group's position and commit as you
        go (see ``AsyncClient.read``).
        """
        client = self.async_client
        stream = client.read(
            log_id,
            start,
            until,
            single_copy=single_copy,
            show_compacted=show_compacted,
            group=group,
            autocommit=autocommit,
        )
        try:
            while True:
                items = self._call(stream.next_objects)
                if not items:
                    return
                yield from items
        finally:
            with contextlib.suppress(ClosedError):
                self._call(stream.aclose)

    def read_batches(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        *,
        group: str | None = None,
        autocommit: bool = False,
    ) -> Iterator[list[Any]]:
        """Like ``read``, but columnar: lists of ``RecordRun`` and ``GapItem``."""
        client = self.async_client
        stream = client.read(log_id, start, until, group=group, autocommit=autocommit)
        try:
            while True:
                items = self._call(stream._next_items)
                if not items:
                    return
                yield items
        finally:
            with contextlib.suppress(ClosedError):
                self._call(stream.aclose)

    def read_columns(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        *,
        group: str | None = None,
        autocommit: bool = False,
    ) -> Iterator[ColumnBatch]:
        """Read a log as columns: ``ColumnBatch`` objects (LSNs, timestamps,
        keys and payloads as lists, and the gaps met), in LSN order.

        Far cheaper per record than ``read`` (no object per record); what
        bulk consumers such as the Spark data source use.  ``group``,
        ``autocommit``: as for ``read``.
        """
        from ._columns import ColumnBatch  # numpy: columnar reads only

        for items in self.read_batches(log_id, start, until, group=group, autocommit=autocommit):
            yield ColumnBatch.of(log_id, items)

    def read_arrow(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        *,
        on_gap: Callable[[Gap], None] | None = None,
        group: str | None = None,
        autocommit: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Read a log as ``pyarrow.RecordBatch``es (``client.ARROW_SCHEMA``:
        log_id, lsn, epoch, esn, timestamp, key, payload), about 65,536 rows
        each.  Gaps are not rows: each one goes to ``on_gap`` as it is met.
        ``group``, ``autocommit``: as for ``read`` (a batch counts as
        processed when the next one is asked for).
        Needs pyarrow (``logstrand[arrow]``)."""
        from ._arrow import arrow_batches

        columns = self.read_columns(log_id, start, until, group=group, autocommit=autocommit)
        return arrow_batches(columns, on_gap=on_gap)

    # -- consumer groups (see ``AsyncClient``) -------------------------------------

    def commit(self, group: str, log_id: int, lsn: int) -> int:
        """Record that ``group`` has processed ``log_id`` up to and including ``lsn``."""
        return int(self._call(self.async_client.commit, group, log_id, lsn))

    def committed(self, group: str, log_id: int) -> int | None:
        """The LSN ``group`` last committed on ``log_id``; None: none."""
        lsn: int | None = self._call(self.async_client.committed, group, log_id)
        return lsn

    def group_positions(self) -> dict[str, list[Position]]:
        return dict(self._call(self.async_client.group_positions))

    def describe_group(self, group: str) -> list[GroupLag]:
        return list(self._call(self.async_client.describe_group, group))

    def reset_group(
        self, group: str, log_id: int, how: str, value: int | None = None, *, dry_run: bool = False
    ) -> tuple[int | None, int]:
        client = self.async_client
        result: tuple[int | None, int] = self._call(
            lambda: client.reset_group(group, log_id, how, value, dry_run=dry_run)
        )
        return result

    def delete_group(self, group: str) -> list[int]:
        return list(self._call(self.async_client.delete_group, group))

    def compact(self, log_id: int, *, timeout_s: float = 900.0) -> dict[str, Any]:
        """Run a compaction pass now and return its stats (see ``AsyncClient.compact``)."""
        client = self.async_client
        return dict(self._call(lambda: client.compact(log_id, timeout_s=timeout_s)))

    def compaction_state(self, log_id: int) -> dict[str, Any] | None:
        state: dict[str, Any] | None = self._call(self.async_client.compaction_state, log_id)
        return state

    def log_directory(self, log_id: int) -> list[LogSegment]:
        """The nodes' partition directory entries of the log (see ``AsyncClient``)."""
        return list(self._call(self.async_client.log_directory, log_id))

    def log_attributes(self, log_id: int) -> LogAttributes:
        """The log's attributes (see ``AsyncClient.log_attributes``)."""
        attributes: LogAttributes = self._call(self.async_client.log_attributes, log_id)
        return attributes

    def sequencer_node(self, log_id: int) -> int | None:
        """The live node that runs the log's sequencer, as this client sees it."""
        return self.async_client.sequencer_node(log_id)

    def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None:
        """How recovery ended an epoch of the log (None: it never did)."""
        end: EpochEnd | None = self._call(self.async_client.epoch_end, log_id, epoch)
        return end

    def sequencer_state(self, log_id: int) -> SeqState | None:
        """The log's sequencer as its node sees it (see ``AsyncClient.sequencer_state``)."""
        state: SeqState | None = self._call(self.async_client.sequencer_state, log_id)
        return state

    def tail_lsn(self, log_id: int) -> int:
        return int(self._call(self.async_client.tail_lsn, log_id))

    def trim_point(self, log_id: int) -> int:
        return int(self._call(self.async_client.trim_point, log_id))

    def find_time(self, log_id: int, timestamp_ms: int) -> int:
        return int(self._call(self.async_client.find_time, log_id, timestamp_ms))

    def is_empty(self, log_id: int) -> bool:
        return bool(self._call(self.async_client.is_empty, log_id))

    def data_size(self, log_id: int) -> int:
        return int(self._call(self.async_client.data_size, log_id))

    def trim(self, log_id: int, lsn: int) -> int:
        """Trim the log up to ``lsn`` (see ``AsyncClient.trim``); returns the trim point."""
        return int(self._call(self.async_client.trim, log_id, lsn))

    def node_status(self, node_id: int) -> NodeStatus | None:
        """One node's state (None when it does not answer)."""
        status: NodeStatus | None = self._call(self.async_client.node_status, node_id)
        return status

    def log_info(self, log_id: int) -> list[LogInfoReply]:
        """What each answering node of the log's nodesets knows of it."""
        return list(self._call(self.async_client.log_info, log_id))

    @property
    def async_client(self) -> AsyncClient:
        if self._client is None:
            raise ClosedError("client is closed")
        return self._client

    def close(self) -> None:
        if self._stop is not None and self._token is not None:
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


def connect(
    url: str,
    *,
    settings: ClientSettings | None = None,
    token: str | None = None,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    credentials: Credentials | None = None,
) -> Client:
    """A blocking client::

        with logstrand.connect("sqlite:///tmp/c/cluster.db") as client:
            lsn = client.append(1, b"hello")

    For a cluster with TLS (docs/security.md): ``ca`` is the cluster's CA
    certificate, and the client authenticates with ``token`` (from
    ``logstrand users add``) or a client certificate (``cert`` and ``key``).

    Raises:
        AccessDeniedError: (on first use) the nodes do not accept the credentials.
    """
    if credentials is None:
        credentials = Credentials.build(token=token, ca=ca, cert=cert, key=key)
    return Client(url, settings=settings, credentials=credentials)

"""The blocking client's reads (``Client``'s): each read is a generator
that takes what the trio client's stream delivers on the client's thread,
a list at a time, and closing it stops the stream's node streams."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Unpack

from ..errors import ClosedError
from ..types import LSN_OLDEST, TAIL, Gap, Record, _Tail

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Generator, Iterator

    import pyarrow as pa

    from ._async import AsyncClient
    from ._columns import ColumnBatch
    from ._options import ManyOptions, ReadOptions, SubscribeOptions
    from ._reader import ReadStream


class BlockingReads:
    """Reads of the blocking client (a mixin of ``Client``, whose
    ``_call`` runs a step on the client's trio thread)."""

    @property
    def async_client(self) -> AsyncClient:
        raise NotImplementedError

    def _call(self, fn: Any, *args: Any) -> Any:
        raise NotImplementedError

    def read(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ReadOptions],
    ) -> Generator[Record | Gap]:
        """Read a log in LSN order: ``Record`` and ``Gap`` items (see
        ``AsyncClient.read``; ``options`` as ``ReadOptions`` says).

        Items cross from the client's trio thread in batches.  Close the
        generator (or finish it) to stop the node streams.
        """
        stream = self.async_client.read(log_id, start, until, **options)
        for items in self._drain(stream, stream.next_objects):
            yield from items

    def read_batches(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ReadOptions],
    ) -> Iterator[list[Any]]:
        """Like ``read``, but columnar: lists of ``RecordRun`` and ``GapItem``."""
        stream = self.async_client.read(log_id, start, until, **options)
        return self._drain(stream, stream._next_items)

    def _drain(
        self, stream: ReadStream, step: Callable[[], Awaitable[list[Any]]]
    ) -> Iterator[list[Any]]:
        """What ``step`` takes from ``stream`` on the client's trio thread, a
        list at a time, until the stream ends; closing the generator closes
        the stream (its node streams stop)."""
        try:
            while True:
                items = self._call(step)
                if not items:
                    return
                yield items
        finally:
            with contextlib.suppress(ClosedError):  # closing ends its streams with it
                self._call(stream.aclose)

    def read_columns(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ReadOptions],
    ) -> Iterator[ColumnBatch]:
        """Read a log as columns: ``ColumnBatch`` objects (LSNs, timestamps,
        keys and payloads as lists, and the gaps met), in LSN order.

        Far cheaper per record than ``read`` (no object per record); what
        bulk consumers such as the Spark data source use.  ``options``: as
        for ``read``.
        """
        from ._columns import ColumnBatch  # numpy: columnar reads only

        for items in self.read_batches(log_id, start, until, **options):
            yield ColumnBatch.of(log_id, items)

    def read_arrow(
        self,
        log_id: int,
        start: int = LSN_OLDEST,
        until: int | _Tail | None = TAIL,
        *,
        on_gap: Callable[[Gap], None] | None = None,
        **options: Unpack[ReadOptions],
    ) -> Iterator[pa.RecordBatch]:
        """Read a log as ``pyarrow.RecordBatch``es (``client.ARROW_SCHEMA``:
        log_id, lsn, epoch, esn, timestamp, key, payload), about 65,536 rows
        each.  Gaps are not rows: each one goes to ``on_gap`` as it is met.
        ``options``: as for ``read`` (with ``autocommit``, a batch counts as
        processed when the next one is asked for).
        Needs pyarrow (``logstrand[arrow]``)."""
        from ._arrow import arrow_batches

        columns = self.read_columns(log_id, start, until, **options)
        return arrow_batches(columns, on_gap=on_gap)

    def subscribe(
        self,
        group: str,
        logs: list[int] | tuple[int, ...] | range | str,
        **options: Unpack[SubscribeOptions],
    ) -> Iterator[tuple[int, Record | Gap]]:
        """Join ``group`` and read the logs it gives this member: ``(log,
        item)`` pairs (see ``AsyncClient.subscribe``).  A batch of pairs is
        processed once the next is asked for; closing the iterator (or
        leaving a ``for`` over it) commits and leaves the group."""
        sub = self.async_client.subscribe(group, logs, **options)
        try:
            while pairs := self._call(sub.next_pairs):
                yield from pairs
        finally:
            with contextlib.suppress(ClosedError):
                self._call(sub.aclose)

    def read_many(
        self,
        starts: dict[int, int] | str,
        until: int | _Tail | None = TAIL,
        **options: Unpack[ManyOptions],
    ) -> Iterator[tuple[int, Record | Gap]]:
        """Read many logs at once: ``(log, item)`` pairs, each log in LSN
        order (see ``AsyncClient.read_many``).  Pairs cross from the client's
        thread as many as have arrived at a time.  Closing the iterator (or
        leaving a ``for`` over it) stops the nodes' streams."""
        reader = self.async_client.read_many(starts, until, **options)
        try:
            while pairs := self._call(reader.next_pairs):
                yield from pairs
        finally:
            with contextlib.suppress(ClosedError):  # closing ends its streams with it
                self._call(reader.aclose)

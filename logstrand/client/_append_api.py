"""The append half of ``AsyncClient``: one record, a batch, a batch numbered
by an outside producer, to a log or to a named range; with headers and
create times (``batch.pack_extra``) when the caller gives them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..batch import extras_of, pack_extra
from ..errors import InvalidArgumentError
from ..records import CONTROL, TRANSACTIONAL
from ._names import append_to_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from ..batch import Header
    from ..rpc import ClusterView
    from ._appender import Appender
    from ._names import Names


class AppendApi:
    """What ``AsyncClient`` offers to append (it has the fields)."""

    view: ClusterView
    names: Names
    _appender: Appender

    async def append(
        self,
        log_id: int | str,
        payload: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
    ) -> int:
        """Append one record; returns its LSN once R copies are stored.

        Concurrent calls for one log coalesce into few APPENDs.  ``log_id``
        may name a range (``logs create --name``): a keyed record goes to the
        log Kafka's default partitioner picks for the key, one without a key
        to the range's logs in turn (``log_of``).  ``headers``: (name, value)
        pairs kept with the record and returned by reads.

        Raises:
            NotFoundError: the log does not exist.
            InvalidArgumentError: TOOBIG, NOKEY (no key in a compacted log),
                a bad header.  (A payload None is a record without one, as
                Kafka's null value; in a compacted log, its key's tombstone.)
            TransientError: TIMEDOUT, or no sequencer could be reached in time.
        """
        extra = pack_extra(None, headers) if headers else None
        if isinstance(log_id, str):
            log_id = await self.names.resolve(log_id, key)
        return await self._appender.append(log_id, payload, key, extra)

    async def log_of(self, log_id: int | str, *, key: bytes | None = None) -> int:
        """The log an append of a record with ``key`` to ``log_id`` (a log, or
        a range's name) goes to.

        Raises:
            NotFoundError: no range has that name.
        """
        if isinstance(log_id, str):
            return await self.names.resolve(log_id, key)
        return log_id

    async def append_batch(
        self,
        log_id: int | str,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[Header] | None] | None = None,
        create_times: Sequence[int | None] | None = None,
        extras: Sequence[bytes | None] | None = None,
    ) -> list[int]:
        """Append many records in order; returns their LSNs (consecutive within
        each APPEND).  To a range's name: each record goes to its key's log
        (``append``), and the order holds within each log; records without
        keys all go to the next log in turn.  ``headers`` (per record, None or
        (name, value) pairs) and ``create_times`` (per record, ms since the
        epoch, or None: the producer's own time, as Kafka's CreateTime) are
        kept with the records and returned by reads; or ``extras``, both
        already packed per record (``batch.pack_extra``)."""
        extras = _extras(len(payloads), headers, create_times, extras)
        if isinstance(log_id, str):
            return await append_to_name(
                self.names, self._appender.append_batch, log_id, payloads, keys, extras
            )
        return await self._appender.append_batch(log_id, payloads, keys, extras)

    async def append_arrow(
        self, log_id: int, data: Any, *, payload: str = "payload", key: str | None = "key"
    ) -> np.ndarray[Any, np.dtype[np.uint64]]:
        """Append the rows of a ``pyarrow.RecordBatch`` or ``Table`` in
        order; returns their LSNs.  Payloads come from the column
        ``payload`` (binary or string; null: no payload, in a compacted log a
        tombstone), keys from ``key``
        when the data has that column.  Each APPEND's body is packed straight
        from the columns' buffers: no Python object per row (the Spark sink
        writes this way).  Needs pyarrow (``logstrand[arrow]``).

        Raises as ``append_batch``; a missing or mistyped column is
        InvalidArgumentError, before anything is sent."""
        import numpy as np

        from ._arrow_append import ArrowRows

        if not isinstance(log_id, int):
            raise InvalidArgumentError("append_arrow takes a log id (ranges: split by log_of)")
        rows = ArrowRows(data, payload, key)
        rows.check(self._appender.settings)
        await self._appender.check(log_id, (), ())
        spans = rows.spans(self._appender.settings)
        firsts = await self._appender.append_spans(log_id, spans, rows.batch)
        if not spans:
            return np.zeros(0, np.uint64)
        return np.concatenate(
            [
                np.arange(f, f + e - s, dtype=np.uint64)
                for (s, e), f in zip(spans, firsts, strict=True)
            ]
        )

    async def append_numbered(
        self,
        log_id: int,
        payloads: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[Header] | None] | None = None,
        create_times: Sequence[int | None] | None = None,
        extras: Sequence[bytes | None] | None = None,
        producer: tuple[int, int],
        transactional: bool = False,
    ) -> int:
        """Append one batch numbered by the caller's producer: ``producer`` is
        (an id from ``allocate_producer_id``, the number of the batch's first
        record).  Stored once: sent again, it is answered with the first LSN
        it got, which this returns (the Kafka front's idempotent producers).
        ``headers``, ``create_times`` and ``extras`` as for ``append_batch``;
        ``transactional``: the records belong to the producer's open
        transaction (a committed reader holds them until its marker).

        Raises ProducerError (OUT_OF_SEQUENCE: a gap after the producer's last
        batch; UNKNOWN_PRODUCER) and DuplicateAppendError (taken long ago)."""
        key_list = list(keys) if keys is not None else [None] * len(payloads)
        if len(key_list) != len(payloads):
            raise InvalidArgumentError("keys and payloads differ in length")
        extras = _extras(len(payloads), headers, create_times, extras)
        flags = TRANSACTIONAL if transactional else 0
        return await self._appender.append_numbered(
            log_id, payloads, key_list, producer, extras, flags
        )

    async def append_marker(
        self, log_id: int, marker: bytes, number: tuple[int, int] | None = None
    ) -> int:
        """Append a transaction's COMMIT or ABORT marker (``marker``, as
        ``transactions.encode_marker`` makes it): a record readers never
        deliver, which ends the producer's transaction in this log;
        ``number``: (the producer's fence key, the marker's number in the
        log), which makes it idempotent and fences the producer's older
        epochs.  A coordinator's, not an application's."""
        return await self._appender.append_numbered(log_id, [marker], [None], number, None, CONTROL)

    async def allocate_producer_id(self) -> int:
        """A producer id no other producer of the cluster has (``append_numbered``)."""
        return await self.view.astore.run(lambda s: s.allocate_producer_id())


def _extras(
    n: int,
    headers: Sequence[Sequence[Header] | None] | None,
    create_times: Sequence[int | None] | None,
    extras: Sequence[bytes | None] | None,
) -> Sequence[bytes | None] | None:
    if extras is None:
        return extras_of(n, headers, create_times)
    if headers is not None or create_times is not None:
        raise InvalidArgumentError("give extras, or headers and create times, not both")
    if len(extras) != n:
        raise InvalidArgumentError("extras and payloads differ in length")
    return extras

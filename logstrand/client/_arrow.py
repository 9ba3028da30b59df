"""Reads as Arrow: ``pyarrow.RecordBatch``es in the schema the Spark source
uses, built column by column from the reader's columns (no object per record).

pyarrow is imported here only; a client that never asks for Arrow never loads
it (``pip install logstrand[arrow]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..batch import unpack_extra
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ..types import Gap
    from ._columns import ColumnBatch

#: A record's headers: (name, value) pairs in the order written (null: none).
HEADERS_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]),
        nullable=False,
    )
)

#: One row per record.  Spark insists that batches match its schema exactly
#: (nullability and time zone included); ``spark._source.LOG_SCHEMA`` is this,
#: field for field.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("log_id", pa.int64(), nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("epoch", pa.int32(), nullable=False),
        pa.field("esn", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.binary(), nullable=True),
        pa.field("payload", pa.binary(), nullable=True),
        pa.field("headers", HEADERS_TYPE, nullable=True),
        pa.field("create_time", pa.timestamp("us", tz="UTC"), nullable=True),
    ]
)

#: LSNs travel as signed 64-bit integers: an epoch must stay below 2^31.
LSN_SIGNED_MAX = (1 << 63) - 1
ROWS_PER_BATCH = 65_536


def arrow_batch(
    log_id: int,
    lsns: Sequence[int],
    timestamps_ms: Sequence[int],
    keys: Sequence[bytes | None],
    payloads: Sequence[bytes | None],
    extras: Sequence[bytes | None] | None = None,
) -> pa.RecordBatch:
    """One Arrow batch of a log's records (columns of equal length)."""
    n = len(lsns)
    if n and max(lsns) > LSN_SIGNED_MAX:
        raise InvalidArgumentError("an LSN at or above 2^63 does not fit a signed 64-bit column")
    lsn = pa.array(lsns, type=pa.int64())
    ts_us = pc.multiply(pa.array(timestamps_ms, type=pa.int64()), 1000)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(log_id, pa.int64()), n),
            lsn,
            pc.shift_right(lsn, 32).cast(pa.int32()),
            pc.bit_wise_and(lsn, 0xFFFFFFFF),
            ts_us.cast(pa.timestamp("us", tz="UTC")),
            pa.array(keys, type=pa.binary()),
            pa.array(payloads, type=pa.binary()),
            *_extras_arrays(extras, n),
        ],
        schema=ARROW_SCHEMA,
    )


def _extras_arrays(extras: Sequence[bytes | None] | None, n: int) -> list[pa.Array]:
    """The headers and create time columns of records' extras."""
    if extras is None:
        return [pa.nulls(n, HEADERS_TYPE), pa.nulls(n, pa.timestamp("us", tz="UTC"))]
    unpacked = [unpack_extra(x) for x in extras]
    headers = [[{"key": k, "value": v} for k, v in hs] if hs else None for _, hs in unpacked]
    created = [None if c is None else c * 1000 for c, _ in unpacked]
    return [
        pa.array(headers, type=HEADERS_TYPE),
        pa.array(created, type=pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ]


def _binary_array(offsets: Any, data: Any, valid: Any) -> pa.Array:
    """An Arrow binary column straight from offsets, bytes and validity."""
    n = len(valid)
    if offsets[-1] > 2**31 - 1:
        raise InvalidArgumentError("over 2 GiB of bytes in one Arrow batch")
    nulls = int(n - np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count=nulls,
    )


def columns_batch(batch: ColumnBatch) -> pa.RecordBatch:
    """One Arrow batch of a ``ColumnBatch``, column by column, no per-record objects."""
    n = len(batch)
    if n and int(batch.lsn.max()) > LSN_SIGNED_MAX:
        raise InvalidArgumentError("an LSN at or above 2^63 does not fit a signed 64-bit column")
    lsn = pa.array(batch.lsn.astype(np.int64))
    ts_us = pa.array(batch.timestamp_ms.astype(np.int64) * 1000)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(batch.log_id, pa.int64()), n),
            lsn,
            pc.shift_right(lsn, 32).cast(pa.int32()),
            pc.bit_wise_and(lsn, 0xFFFFFFFF),
            ts_us.cast(pa.timestamp("us", tz="UTC")),
            _binary_array(batch.key_offsets, batch.key_data, batch.key_valid),
            _binary_array(batch.payload_offsets, batch.payload_data, batch.payload_valid),
            *_extras_arrays(batch.extras, n),
        ],
        schema=ARROW_SCHEMA,
    )


def arrow_batches(
    columns: Iterator[ColumnBatch],
    *,
    rows: int = ROWS_PER_BATCH,
    on_gap: Callable[[Gap], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The reader's column batches as Arrow batches of about ``rows`` records
    (several joined when small); each gap met goes to ``on_gap`` (before the
    records after it)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in columns:
        if batch.gaps and on_gap is not None:
            for gap in batch.gaps:
                on_gap(gap)
        if not len(batch):
            continue
        held.append(columns_batch(batch))
        count += len(batch)
        if count >= rows:
            yield _joined(held)
            held, count = [], 0
    if held:
        yield _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA).combine_chunks().to_batches()[0]

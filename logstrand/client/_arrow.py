"""Reads as Arrow: ``pyarrow.RecordBatch``es in the schema the Spark source
uses, built column by column from the reader's columns (no object per record).

pyarrow is imported here only; a client that never asks for Arrow never loads
it (``pip install logstrand[arrow]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ..types import Gap
    from ._columns import ColumnBatch

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
        ],
        schema=ARROW_SCHEMA,
    )


def arrow_batches(
    columns: Iterator[ColumnBatch],
    *,
    rows: int = ROWS_PER_BATCH,
    on_gap: Callable[[Gap], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Join the reader's column batches into Arrow batches of about ``rows``
    records; each gap met goes to ``on_gap`` (before the records after it)."""
    lsns: list[int] = []
    ts: list[int] = []
    keys: list[bytes | None] = []
    payloads: list[bytes | None] = []
    log_id = 0
    for batch in columns:
        log_id = batch.log_id
        if batch.gaps and on_gap is not None:
            for gap in batch.gaps:
                on_gap(gap)
        lsns += batch.lsns
        ts += batch.timestamps_ms
        keys += batch.keys
        payloads += batch.payloads
        if len(lsns) >= rows:
            yield arrow_batch(log_id, lsns, ts, keys, payloads)
            lsns, ts, keys, payloads = [], [], [], []
    if lsns:
        yield arrow_batch(log_id, lsns, ts, keys, payloads)

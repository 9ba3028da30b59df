"""Records as Arrow: the read path's columns → ``pyarrow.RecordBatch`` in the
data source's schema, and the writer's Arrow batches → payloads and keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The rows a read yields, as Arrow sees them.  Spark insists that the batches
#: match its schema exactly (nullability and time zone included):
#: ``LOG_SCHEMA`` in ``_source`` is this, field for field.
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

#: LSNs travel as signed BIGINT: an epoch must stay below 2^31.
LSN_SIGNED_MAX = (1 << 63) - 1


def record_batch(
    log_id: int,
    lsns: Sequence[int],
    timestamps_ms: Sequence[int],
    keys: Sequence[bytes | None],
    payloads: Sequence[bytes | None],
) -> pa.RecordBatch:
    """One Arrow batch of a log's records (columns of equal length)."""
    n = len(lsns)
    lsn = np.array(lsns, dtype=np.uint64)
    if n and int(lsn.max()) > LSN_SIGNED_MAX:
        raise InvalidArgumentError("an LSN above 2^63 does not fit Spark's BIGINT")
    lsn = lsn.astype(np.int64)
    ts = np.array(timestamps_ms, dtype=np.int64) * 1000
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(n, log_id, dtype=np.int64)),
            pa.array(lsn),
            pa.array((lsn >> 32).astype(np.int32)),
            pa.array(lsn & 0xFFFFFFFF),
            pa.array(ts, type=pa.timestamp("us", tz="UTC")),
            pa.array(keys, type=pa.binary()),
            pa.array(payloads, type=pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


def _binary_column(batch: pa.RecordBatch, name: str) -> list[bytes | None] | None:
    i = batch.schema.get_field_index(name)
    if i < 0:
        return None
    col: Any = batch.column(i)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    elif not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        raise InvalidArgumentError(f"column {name!r} must be binary or string, not {col.type}")
    values: list[bytes | None] = col.to_pylist()
    return values


def rows_for_append(
    batch: pa.RecordBatch, log: int | None
) -> dict[int, tuple[list[bytes | None], list[bytes | None] | None]]:
    """A writer's Arrow batch → per log, (payloads, keys or None), in row order.

    The log comes from ``log`` (the option) when given, else from a
    ``log_id`` column.  ``payload`` is required; a null payload is a tombstone.
    """
    payloads = _binary_column(batch, "payload")
    if payloads is None:
        raise InvalidArgumentError("a 'payload' column (binary or string) is required")
    keys = _binary_column(batch, "key")
    if log is not None:
        return {log: (payloads, keys)}
    i = batch.schema.get_field_index("log_id")
    if i < 0:
        raise InvalidArgumentError("give the 'log' option or a 'log_id' column")
    ids = batch.column(i)
    if ids.null_count:
        raise InvalidArgumentError("log_id must not be null")
    logs = np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64)
    out: dict[int, tuple[list[bytes | None], list[bytes | None] | None]] = {}
    for log_id in np.unique(logs):
        rows = np.flatnonzero(logs == log_id).tolist()
        out[int(log_id)] = (
            [payloads[r] for r in rows],
            None if keys is None else [keys[r] for r in rows],
        )
    return out

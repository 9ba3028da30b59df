"""The writer's Arrow batches → the rows of each log, still as Arrow (the
client packs APPEND bodies straight from their buffers: ``append_arrow``).
(Reads come as Arrow from the client: ``client.read_arrow``.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..client._arrow_append import ArrowRows
from ..errors import InvalidArgumentError


def rows_by_log(batch: pa.RecordBatch, log: int | None) -> dict[int, ArrowRows]:
    """A writer's Arrow batch → per log, its rows (``payload``, and ``key``
    when there is one), in row order, columns checked.

    The log comes from ``log`` (the option) when given, else from a
    ``log_id`` column.  ``payload`` is required; a null payload is a tombstone.
    """
    if log is not None:
        return {log: ArrowRows(batch)}
    i = batch.schema.get_field_index("log_id")
    if i < 0:
        ArrowRows(batch)  # a missing or mistyped payload column is said first
        raise InvalidArgumentError("give the 'log' option or a 'log_id' column")
    ids = batch.column(i)
    if ids.null_count:
        raise InvalidArgumentError("log_id must not be null")
    logs = np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64)
    first = int(logs[0]) if len(logs) else 0
    if not len(logs) or (logs == first).all():
        return {first: ArrowRows(batch)} if len(logs) else {}
    out: dict[int, ArrowRows] = {}
    for log_id in np.unique(logs):
        rows: Any = batch.take(pa.array(np.flatnonzero(logs == log_id)))
        out[int(log_id)] = ArrowRows(rows)
    return out

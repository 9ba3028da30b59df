"""The writer's Arrow batches → payloads and keys per log.  (Reads come as
Arrow from the client: ``client.read_arrow``.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError


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

"""Appends of Arrow columns: each APPEND's body packed straight from the
columns' buffers (``batch.seal_body``), with no Python object per record.

A packed body is a table of int32 lengths (keys, then payloads; -1 for
none) followed by the keys' bytes and the payloads' bytes.  An Arrow binary
column is already nearly that: its offsets give the lengths and its data
buffer holds the values back to back, so a span of rows becomes a body in
one copy of its bytes (and one compression, when the log has a codec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..batch import PackedBatch, seal_body
from ..errors import InvalidArgumentError, Status
from ..records import KEY_BYTES_MAX

if TYPE_CHECKING:
    from ._settings import ClientSettings

I32 = np.dtype("<i4")


def _binary(name: str, arr: Any) -> Any:
    """``arr`` as one binary (or large binary) array."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_string(arr.type):
        return arr.cast(pa.binary())
    if pa.types.is_large_string(arr.type):
        return arr.cast(pa.large_binary())
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        raise InvalidArgumentError(f"column {name!r} must be binary or string, not {arr.type}")
    return arr


def _offsets(arr: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Where each value of a binary array starts in its data buffer, and the end."""
    wide = pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32)
    return offsets[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)


class BinaryColumn:
    """One binary column's lengths (-1: null) and bytes, as Arrow holds them."""

    def __init__(self, name: str, arr: Any) -> None:
        arr = _binary(name, arr)
        offsets = _offsets(arr)
        lens = np.diff(offsets)
        if arr.null_count:
            nulls = arr.is_null().to_numpy(zero_copy_only=False)
            if lens[nulls].any():
                # Arrow lets a null slot span bytes, a body does not: rebuilt
                # without them (rare: builders leave null slots empty).
                arr = pa.array(arr.to_pylist(), arr.type)
                offsets = _offsets(arr)
                lens = np.diff(offsets)
            lens[nulls] = -1
        self.lens = lens.astype(I32)
        self.offsets = offsets
        data = arr.buffers()[2]
        self.data = memoryview(data) if data is not None else memoryview(b"")

    def __len__(self) -> int:
        return len(self.lens)

    def biggest(self) -> int:
        return int(self.lens.max()) if len(self.lens) else 0

    def bytes_of(self, start: int, end: int) -> memoryview:
        return self.data[int(self.offsets[start]) : int(self.offsets[end])]


class ArrowRows:
    """The rows of an Arrow batch to append: payloads from the column
    ``payload`` (null: a tombstone), keys from ``key`` when it has one."""

    def __init__(self, data: Any, payload: str = "payload", key: str | None = "key") -> None:
        if not isinstance(data, (pa.RecordBatch, pa.Table)):
            raise InvalidArgumentError(
                f"append_arrow takes a pyarrow RecordBatch or Table, not {type(data).__name__}"
            )
        names = data.schema.names
        if payload not in names:
            raise InvalidArgumentError(f"no column {payload!r} (the payloads) in {names}")
        self.data = data
        self.payloads = BinaryColumn(payload, data.column(payload))
        self.keys = BinaryColumn(key, data.column(key)) if key and key in names else None

    def __len__(self) -> int:
        return len(self.payloads)

    def span(self, start: int, end: int) -> Any:
        """Rows ``[start, end)`` of the data, as the data's type (no copy)."""
        return self.data.slice(start, end - start)

    def check(self, settings: ClientSettings) -> None:
        """Refuse a payload or key over its limit before anything is sent."""
        for what, col, limit in (
            ("payload", self.payloads, settings.payload_bytes_max),
            ("key", self.keys, KEY_BYTES_MAX),
        ):
            if col is not None and (big := col.biggest()) > limit:
                raise InvalidArgumentError(
                    f"{what} of {big} bytes exceeds the limit of {limit}", Status.TOOBIG
                )

    def spans(self, settings: ClientSettings) -> list[tuple[int, int]]:
        """The rows of each APPEND: as ``ClientSettings.batch_end`` cuts a
        list of payloads (at most ``batch_records_max`` records, and
        ``batch_bytes_max`` payload bytes unless one record is bigger)."""
        sizes = np.cumsum(np.maximum(self.payloads.lens, 0), dtype=np.int64)
        out: list[tuple[int, int]] = []
        start, n = 0, len(sizes)
        while start < n:
            before = int(sizes[start - 1]) if start else 0
            end = int(np.searchsorted(sizes, before + settings.batch_bytes_max, side="right"))
            end = min(max(end, start + 1), start + settings.batch_records_max, n)
            out.append((start, end))
            start = end
        return out

    def batch(
        self, start: int, end: int, number: tuple[int, int] | None, codec: int
    ) -> PackedBatch:
        """The APPEND of rows ``[start, end)`` (``Appender.append_spans``)."""
        key_lens = (
            self.keys.lens[start:end] if self.keys is not None else np.full(end - start, -1, I32)
        )
        lengths = np.concatenate((key_lens, self.payloads.lens[start:end])).tobytes()
        parts = [self.payloads.bytes_of(start, end)]
        if self.keys is not None:
            parts.insert(0, self.keys.bytes_of(start, end))
        body, raw_len, crc, used = seal_body(lengths, parts, codec)
        return PackedBatch.for_body(body, raw_len, crc, used, end - start, number)

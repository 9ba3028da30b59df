"""Columnar results of the client: what a read delivers as numpy columns,
and what the nodes' partition directories say of a log.  Pure (no trio)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..batch import LSNS, TIMESTAMPS, unpack_extra
from ..records import CONTROL
from ..types import Gap
from ._reader_core import RecordRun

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._reader_core import Item


_EMPTY_U8 = np.zeros(0, np.uint8)


def _binary(
    runs: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Join (lengths, first offset in blob, blob) runs into (offsets, data, valid)."""
    lens = [r[0] for r in runs]
    sizes = [np.maximum(n, 0) for n in lens]
    offsets = np.zeros(sum(len(n) for n in lens) + 1, np.int64)
    if len(offsets) > 1:
        np.cumsum(np.concatenate(sizes), out=offsets[1:])
    pieces = []
    for (_, at, blob), size in zip(runs, sizes, strict=True):
        start = int(at)
        pieces.append(blob[start : start + int(size.sum())])
    data = np.concatenate(pieces) if pieces else _EMPTY_U8
    valid = np.concatenate(lens) >= 0 if lens else np.zeros(0, bool)
    return offsets, data, valid


def _pieces(
    offsets: np.ndarray[Any, Any], data: np.ndarray[Any, Any], valid: np.ndarray[Any, Any]
) -> list[bytes | None]:
    raw = data.tobytes()
    pos = offsets.tolist()
    return [
        raw[a:b] if ok else None for a, b, ok in zip(pos[:-1], pos[1:], valid.tolist(), strict=True)
    ]


@attrs.frozen
class ColumnBatch:
    """Records as numpy columns (one entry per record, in LSN order) and the
    gaps met since the previous batch, built from the stored batches as they
    arrived, with no Python object per record.

    Keys and payloads are Arrow-style binary columns: record ``i``'s payload
    is ``payload_data[payload_offsets[i]:payload_offsets[i + 1]]`` where
    ``payload_valid[i]`` (False: a tombstone); keys likewise.  ``lsns``,
    ``timestamps_ms``, ``keys`` and ``payloads`` give them as lists (objects
    made on first use, then kept).
    """

    log_id: int
    lsn: np.ndarray[Any, np.dtype[np.uint64]]
    timestamp_ms: np.ndarray[Any, np.dtype[np.uint64]]
    key_offsets: np.ndarray[Any, np.dtype[np.int64]]
    key_data: np.ndarray[Any, np.dtype[np.uint8]]
    key_valid: np.ndarray[Any, np.dtype[np.bool_]]
    payload_offsets: np.ndarray[Any, np.dtype[np.int64]]
    payload_data: np.ndarray[Any, np.dtype[np.uint8]]
    payload_valid: np.ndarray[Any, np.dtype[np.bool_]]
    gaps: list[Gap]
    #: Every record's headers and create time, packed (``batch.pack_extra``),
    #: or None when no record has any; ``headers`` and ``create_times`` read it.
    extras: list[bytes | None] | None = None

    def __len__(self) -> int:
        return len(self.lsn)

    @functools.cached_property
    def lsns(self) -> list[int]:
        return self.lsn.tolist()  # type: ignore[no-any-return]

    @functools.cached_property
    def timestamps_ms(self) -> list[int]:
        return self.timestamp_ms.tolist()  # type: ignore[no-any-return]

    @functools.cached_property
    def keys(self) -> list[bytes | None]:
        return _pieces(self.key_offsets, self.key_data, self.key_valid)

    @functools.cached_property
    def payloads(self) -> list[bytes | None]:
        return _pieces(self.payload_offsets, self.payload_data, self.payload_valid)

    @functools.cached_property
    def headers(self) -> list[tuple[tuple[str, bytes | None], ...]]:
        """Every record's headers (``()``: none)."""
        if self.extras is None:
            return [()] * len(self.lsn)
        return [unpack_extra(x)[1] for x in self.extras]

    @functools.cached_property
    def create_times(self) -> list[int | None]:
        """Every record's create time, as its producer gave it (None: none)."""
        if self.extras is None:
            return [None] * len(self.lsn)
        return [unpack_extra(x)[0] for x in self.extras]

    @classmethod
    def of(cls, log_id: int, items: Iterable[Item]) -> ColumnBatch:
        """Join the reader's delivered items into one batch."""
        lsns: list[np.ndarray[Any, Any]] = []
        stamps: list[np.ndarray[Any, Any]] = []
        keys: list[Any] = []
        payloads: list[Any] = []
        gaps: list[Gap] = []
        extras: list[bytes | None] = []
        with_extras = False
        for item in items:
            if not isinstance(item, RecordRun):
                gaps.append(Gap(item.type, item.lo, item.hi))
                continue
            if item.txn_flags & CONTROL:
                continue  # a transaction's marker: never delivered
            pb = item.view.packed
            run_extras = item.extras
            with_extras |= run_extras is not None
            extras += [None] * len(item) if run_extras is None else run_extras
            a = item.view.start + item.off
            z = item.view.start + item.end
            n = pb.count
            if pb.layout & LSNS:
                col = np.frombuffer(pb.data, "<u8", n, pb.column_at(LSNS))
                lsns.append(col[a:z])
            else:
                lsns.append(np.arange(pb.first_lsn + a, pb.first_lsn + z, dtype=np.uint64))
            if pb.layout & TIMESTAMPS:
                col = np.frombuffer(pb.data, "<u8", n, pb.column_at(TIMESTAMPS))
                stamps.append(col[a:z])
            else:
                stamps.append(np.full(z - a, pb.timestamp_ms, np.uint64))
            lens = np.frombuffer(pb.data, "<i4", 2 * n, pb.body_start)  # keys, payloads
            buf, base = pb.blob()
            blob = np.frombuffer(buf, np.uint8, pb.raw_len, base)
            ksize = np.maximum(lens[:n], 0)
            psize = np.maximum(lens[n:], 0)
            key_at = int(ksize[:a].sum())
            pay_at = int(ksize.sum()) + int(psize[:a].sum())
            keys.append((lens[:n][a:z], key_at, blob))
            payloads.append((lens[n:][a:z], pay_at, blob))
        u64 = np.zeros(0, np.uint64)
        ko, kd, kv = _binary(keys)
        po, pd, pv = _binary(payloads)
        return cls(
            log_id,
            np.concatenate(lsns) if lsns else u64,
            np.concatenate(stamps) if stamps else u64,
            ko,
            kd,
            kv,
            po,
            pd,
            pv,
            gaps,
            extras if with_extras else None,
        )

"""A stored batch's records as one Kafka batch, from the batch's blob.

The C helper (``_fastrecords``, built by ``pip install`` with the system C
compiler) writes the records straight from the packed batch's blob; where it
is missing, or the records have a shape it does not take (headers), the
records are cut into columns and ``encode_columns`` (Python, the reference)
writes them.  ``LOGSTRAND_PURE_PYTHON=1`` turns the helper off, so that the
fallback can be run (and is, in CI: tests/unit/test_kafka_fastrecords.py).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ..batch import EXTRAS
from ._records_encode import encode_columns, seal_records

if TYPE_CHECKING:
    from ..batch import PackedBatch
    from ..client import RecordRun


def _helper() -> Any:
    """The C module, or None: built without a C compiler (Python does it
    all), or turned off."""
    if os.environ.get("LOGSTRAND_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(f"{__package__}._fastrecords")
    except ImportError:
        return None


_fast = _helper()


def compiled() -> bool:
    """Whether the C helper is in use."""
    return _fast is not None


def _tables(packed: PackedBatch) -> tuple[memoryview, bytes]:
    """The batch's lengths table (int32) as stored, and where each piece
    starts in ``blob()`` (int64), in numpy."""
    table = packed.lengths_table()
    lens = np.frombuffer(table, dtype="<i4")
    _, at = packed.blob()
    ends = np.cumsum(np.maximum(lens, 0), dtype=np.int64)
    starts = np.concatenate(([at], at + ends[:-1])).astype(np.int64)
    return table, starts.tobytes()


class RunEncoder:
    """The records of one run (one stored batch, or part of one) as Kafka
    batches, a chunk of them at a time: what each chunk needs of the run
    (its timestamps, the batch's tables; its columns when Python writes
    them) is taken once for all of them."""

    def __init__(self, run: RecordRun, offsets: list[int]) -> None:
        self.run = run
        #: The run's Kafka offsets.
        self.offsets = offsets
        self.ts = run.timestamps_ms
        packed = run.view.packed
        self._tables = _tables(packed) if _fast is not None else None
        self._extras = bool(packed.layout & EXTRAS)
        self._columns: tuple[Any, Any, Any] | None = None

    def batch(
        self, lo: int, hi: int, leader_epoch: int, codec: int, producer_id: int = -1
    ) -> bytes:
        """Records ``lo`` .. ``hi - 1`` of the run as one batch
        (``encode_columns`` says what the other arguments mean)."""
        offsets, ts, run = self.offsets, self.ts, self.run
        if self._tables is not None:
            lens, starts = self._tables
            got = _fast.kafka_records(
                run.view.packed.blob()[0],
                starts,
                lens,
                run.view.packed.count,
                run.view.start + run.off + lo,
                hi - lo,
                offsets,
                lo,
                ts,
                lo,
                self._extras,
            )
            if got is not None:
                records, first_ts, max_ts = got
                span = (offsets[lo], offsets[hi - 1], first_ts, max_ts, hi - lo)
                return seal_records(records, span, leader_epoch, codec, producer_id)
        if self._columns is None:
            self._columns = (run.keys, run.payloads, run.extras)
        keys, payloads, extras = self._columns
        return encode_columns(
            offsets[lo:hi],
            ts[lo:hi],
            keys[lo:hi],
            payloads[lo:hi],
            None if extras is None else extras[lo:hi],
            leader_epoch,
            codec,
            producer_id=producer_id,
        )

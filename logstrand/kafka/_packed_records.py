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
from ._records import encode_columns, seal_records

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


#: The last batch's tables (``_tables``): a fetch takes a stored batch in
#: chunks, one after another, and each chunk needs them.
_last: list[Any] = [None, None]


def _tables(packed: PackedBatch) -> tuple[memoryview, bytes]:
    """The batch's lengths table (int32) as stored, and where each piece
    starts in ``blob()`` (int64): made once a batch, in numpy."""
    if _last[0] is packed:
        return _last[1]  # type: ignore[no-any-return]
    lens = np.frombuffer(packed.lengths_table(), dtype="<i4")
    _, at = packed.blob()
    ends = np.cumsum(np.maximum(lens, 0), dtype=np.int64)
    starts = np.concatenate(([at], at + ends[:-1])).astype(np.int64)
    _last[:] = packed, (packed.lengths_table(), starts.tobytes())
    return _last[1]  # type: ignore[no-any-return]


def run_batch(
    run: RecordRun,
    offsets: list[int],
    lo: int,
    hi: int,
    leader_epoch: int,
    codec: int,
    producer_id: int = -1,
) -> bytes:
    """Records ``lo`` .. ``hi - 1`` of ``run`` (with ``offsets``, the run's
    Kafka offsets) as one batch (``encode_columns`` says what the other
    arguments mean)."""
    ts = run.timestamps_ms
    if _fast is not None:
        packed = run.view.packed
        lens, starts = _tables(packed)
        got = _fast.kafka_records(
            packed.blob()[0],
            starts,
            lens,
            packed.count,
            run.view.start + run.off + lo,
            hi - lo,
            offsets,
            lo,
            ts,
            lo,
            bool(packed.layout & EXTRAS),
        )
        if got is not None:
            records, first_ts, max_ts = got
            span = (offsets[lo], offsets[hi - 1], first_ts, max_ts, hi - lo)
            return seal_records(records, span, leader_epoch, codec, producer_id)
    extras = run.extras
    return encode_columns(
        offsets[lo:hi],
        ts[lo:hi],
        run.keys[lo:hi],
        run.payloads[lo:hi],
        None if extras is None else extras[lo:hi],
        leader_epoch,
        codec,
        producer_id=producer_id,
    )

"""Wire messages of tiered storage (protocol 9): a reader's read of records
that moved to the object store (docs/tiered-storage.md).

Below a log's tiered point a reader asks one node, not a stream per node:
the records are in one object, one copy each (R=1), and any node reads it
for the reader (checking the reader's grant, as for any read).  The answer
has the stored batches with their windows, as a read stream's
``ReadRecords`` does, and the gaps the object holds (type, lo, hi), and
says where the next read starts and where the tiered point is now: from
the point on, the reader reads the nodes' streams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from . import _fields as f
from ._registry import PACKED_MAX, _packed_tuple, _packed_tuple_from_wire, _status, message

if TYPE_CHECKING:
    from ..batch import PackedBatch

#: The protocol version from which a node answers ``TierRead``.
TIER_PROTOCOL = 9
#: The protocol version from which a reader is told of a node's local floor
#: (``ReadRecords.local_floor``): an older one cannot read below it.
LOCAL_FLOOR_PROTOCOL = 10
#: Bytes of records one answer carries at most (what a reader may ask).
TIER_READ_BYTES_MAX = 16 * 1024 * 1024
#: Gaps one answer carries at most.
TIER_GAPS_MAX = 4096


@message(64, "read")
@attrs.frozen(slots=True)
class TierRead:
    """Reader → node: the log's tiered records from ``start_lsn`` up to
    ``until_lsn``, about ``max_bytes`` of them."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    start_lsn: int = attrs.field(validator=f.u64)
    until_lsn: int = attrs.field(validator=f.u64)
    max_bytes: int = attrs.field(validator=f.u32)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.max_bytes <= TIER_READ_BYTES_MAX:
            raise ValueError(f"max_bytes: 1 to {TIER_READ_BYTES_MAX}")
        if self.start_lsn > self.until_lsn:
            raise ValueError("start_lsn past until_lsn")


@message(65)
@attrs.frozen(slots=True)
class TierReadReply:
    """Node → reader: what the object holds from the start asked for.

    ``next_lsn``: everything below it was answered (records or gaps).
    ``tier_point``: the log's tiered point now; a reader at or past it
    reads the nodes' streams.  ``batches`` and ``windows`` as in
    ``ReadRecords``; ``gaps``: (type, lo, hi) triples, in LSN order among
    the batches' windows."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    next_lsn: int = attrs.field(default=0, validator=f.u64)
    tier_point: int = attrs.field(default=0, validator=f.u64)
    batches: tuple[PackedBatch, ...] = attrs.field(
        default=(), converter=_packed_tuple_from_wire, validator=_packed_tuple
    )
    windows: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u64, max_len=2 * PACKED_MAX)
    )
    gaps: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u64, max_len=3 * TIER_GAPS_MAX)
    )
    message: str = attrs.field(default="", validator=f.text(1000))

    def __attrs_post_init__(self) -> None:
        if len(self.windows) != 2 * len(self.batches) or len(self.gaps) % 3:
            raise ValueError("a window per batch, and gaps as (type, lo, hi)")

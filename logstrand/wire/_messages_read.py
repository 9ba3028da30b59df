"""Wire messages of read streams and of what a node knows of a log."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from . import _fields as f
from ._registry import _batch, _batch_from_wire, _status, message

if TYPE_CHECKING:
    from ..records import RecordBatch


@message(20)
@attrs.frozen(slots=True)
class StartRead:
    """Reader → node: send the records of ``log_id`` you hold from ``start_lsn`` on.

    Sending it again for the same ``stream_id`` (a higher ``generation``)
    rewinds the stream.  ``credit`` is how many records the node may send
    before the reader grants more (flow control).  With ``scd`` (single-copy
    delivery) the node sends only the records whose copyset, without the
    ``known_down`` nodes, starts with the node itself.
    """

    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)
    generation: int = attrs.field(validator=f.u32)
    log_id: int = attrs.field(validator=f.u64)
    start_lsn: int = attrs.field(validator=f.u64)
    until_lsn: int = attrs.field(validator=f.u64)
    credit: int = attrs.field(validator=f.u32)
    scd: bool = attrs.field(validator=f.boolean)
    known_down: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=4096)
    )


@message(21)
@attrs.frozen(slots=True)
class ReadCredit:
    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)
    generation: int = attrs.field(validator=f.u32)
    records: int = attrs.field(validator=f.u32)


@message(22)
@attrs.frozen(slots=True)
class StopRead:
    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)


@message(23)
@attrs.frozen(slots=True)
class ReadRecords:
    """Node → reader: records (maybe none) and the node's position.

    ``next_lsn``: the node has sent everything it will send below this LSN
    (up to its release pointer).  ``trim_point``: its trim point for the log.
    A ``status`` other than OK ends the stream (e.g. NOTFOUND).

    ``waves``: empty when no record in the batch was written by a recovery
    (the usual case), else one per record: the wave that stored the copy, for
    a recovery's copy its seal epoch.  A reader that gets differing copies of
    one LSN keeps the one with the highest precedence, as recovery does.
    """

    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)
    generation: int = attrs.field(validator=f.u32)
    status: int = attrs.field(validator=_status)
    next_lsn: int = attrs.field(validator=f.u64)
    trim_point: int = attrs.field(validator=f.u64)
    batch: RecordBatch = attrs.field(converter=_batch_from_wire, validator=_batch)
    waves: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u32)
    )
    #: The node's clean point for a compacted log: an LSN at or below it that
    #: no node sends was removed by compaction (COMPACTED, not DATALOSS).
    clean_point: int = attrs.field(default=0, validator=f.u64)

    def __attrs_post_init__(self) -> None:
        if self.waves and len(self.waves) != len(self.batch):
            raise ValueError("no waves, or one per record")


@message(24)
@attrs.frozen(slots=True)
class LogInfo:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)


@message(25)
@attrs.frozen(slots=True)
class LogInfoReply:
    """What one node knows of a log: release pointer, trim point, its highest
    stored LSN, and the bytes and records it holds (approximate)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    release_lsn: int = attrs.field(default=0, validator=f.u64)
    trim_point: int = attrs.field(default=0, validator=f.u64)
    last_lsn: int = attrs.field(default=0, validator=f.u64)
    bytes: int = attrs.field(default=0, validator=f.u64)
    records: int = attrs.field(default=0, validator=f.u64)
    first_timestamp_ms: int = attrs.field(default=0, validator=f.u64)
    last_timestamp_ms: int = attrs.field(default=0, validator=f.u64)


@message(26)
@attrs.frozen(slots=True)
class FindTime:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    timestamp_ms: int = attrs.field(validator=f.u64)


@message(27)
@attrs.frozen(slots=True)
class FindTimeReply:
    """The first LSN this node holds with timestamp ≥ the one asked (0: none)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    lsn: int = attrs.field(default=0, validator=f.u64)

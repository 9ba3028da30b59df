"""Wire messages of operations on logs: read streams, what a node knows of a log,
trims, node status, partition directories, compaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from . import _fields as f
from ._registry import (
    PACKED_MAX,
    _packed_tuple,
    _packed_tuple_from_wire,
    _status,
    message,
)

if TYPE_CHECKING:
    from ..batch import PackedBatch


@message(20, "read")
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


@message(21, "any")
@attrs.frozen(slots=True)
class ReadCredit:
    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)
    generation: int = attrs.field(validator=f.u32)
    records: int = attrs.field(validator=f.u32)


@message(22, "any")
@attrs.frozen(slots=True)
class StopRead:
    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)


@message(23)
@attrs.frozen(slots=True)
class ReadRecords:
    """Node → reader: stored batches (maybe none) and the node's position.

    ``next_lsn``: the node has sent everything it will send below this LSN
    (up to its release pointer).  ``trim_point``: its trim point for the log.
    A ``status`` other than OK ends the stream (e.g. NOTFOUND).

    ``batches`` are the packed batches as the node stored them, undecoded;
    ``windows`` holds a (first, last) LSN pair per batch: the reader takes
    only that batch's records within it (a batch may reach below the
    stream's start or above the release pointer, or hold copies that a
    recovery decided against).  Each batch's header has its wave: a reader
    that gets differing copies of one LSN keeps the one with the highest
    precedence, as recovery does.
    """

    TYPE_ID: ClassVar[int]
    stream_id: int = attrs.field(validator=f.u64)
    generation: int = attrs.field(validator=f.u32)
    status: int = attrs.field(validator=_status)
    next_lsn: int = attrs.field(validator=f.u64)
    trim_point: int = attrs.field(validator=f.u64)
    batches: tuple[PackedBatch, ...] = attrs.field(
        default=(), converter=_packed_tuple_from_wire, validator=_packed_tuple
    )
    windows: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u64, max_len=2 * PACKED_MAX)
    )
    #: The node's clean point for a compacted log: an LSN at or below it that
    #: no node sends was removed by compaction (COMPACTED, not DATALOSS).
    clean_point: int = attrs.field(default=0, validator=f.u64)
    #: (first, last) pairs: LSNs whose copies on the node fail a checksum (or
    #: sit in a block its storage cannot read).  The node holds no readable
    #: copy of them; the reader asks another holder, or reports CHECKSUM_FAIL.
    unreadable: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u64, max_len=2 * PACKED_MAX)
    )
    #: The node's local floor for a tiered log: its copies at or below it
    #: are in the object store, not here.  The reader reads those LSNs there
    #: (``TierRead``), never calls them missing.  Sent from protocol 10 on.
    local_floor: int = attrs.field(default=0, validator=f.u64)

    def __attrs_post_init__(self) -> None:
        if len(self.windows) != 2 * len(self.batches):
            raise ValueError("one window (first, last) per batch")
        bad = self.unreadable
        if len(bad) % 2 or any(bad[i] > bad[i + 1] for i in range(0, len(bad), 2)):
            raise ValueError("unreadable: (first, last) pairs with first <= last")


@message(24, "read")
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
    #: Ranges of the log's copies this node found unreadable since it started.
    corrupt_copies: int = attrs.field(default=0, validator=f.u64)


@message(26, "read")
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


@message(34, "node")
@attrs.frozen(slots=True)
class Trim:
    """Node → node: move the log's trim point up to ``lsn`` (never down); the
    epoch store already records it (see ``TrimLog``)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    lsn: int = attrs.field(validator=f.u64)


@message(45, "trim")
@attrs.frozen(slots=True)
class TrimLog:
    """Client → any node: record ``lsn`` as the log's trim point in the epoch
    store (never down), and apply it on the log's nodes.  The answer is a
    ``TrimReply`` with the trim point recorded.  Clients trim through a node
    so that the node checks the client's permission first."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    lsn: int = attrs.field(validator=f.u64)


@message(35)
@attrs.frozen(slots=True)
class TrimReply:
    """The node's trim point for the log after the TRIM (persisted)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    trim_point: int = attrs.field(default=0, validator=f.u64)


@message(36, "admin")
@attrs.frozen(slots=True)
class GetNodeStatus:
    """Client → node: how are you?"""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)


@message(37)
@attrs.frozen(slots=True)
class NodeStatus:
    """A node's state: LogsDB partitions and size, the logs it sequences."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    partitions: int = attrs.field(validator=f.u32)
    disk_bytes: int = attrs.field(validator=f.u64)
    logs: int = attrs.field(validator=f.u32)
    sequencing: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u64, max_len=1 << 16)
    )
    uptime_s: int = attrs.field(default=0, validator=f.u32)
    #: Ranges of copies this node found unreadable (a checksum failed) since it started.
    corrupt_copies: int = attrs.field(default=0, validator=f.u64)
    #: Free bytes of the data directory's file system, and 1 while the node
    #: refuses STOREs for want of space (below ``--min-free``, or a write failed).
    free_bytes: int = attrs.field(default=0, validator=f.u64)
    space_low: int = attrs.field(default=0, validator=f.u32)
    #: Bytes of records given to LogsDB since the node started, and bytes its
    #: flushes and compactions wrote for them (their ratio: write amplification).
    user_written: int = attrs.field(default=0, validator=f.u64)
    disk_written: int = attrs.field(default=0, validator=f.u64)


@message(38, "read")
@attrs.frozen(slots=True)
class GetLogDirectory:
    """Ask a node for its partition directory entries of one log."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)


#: Fields per entry of ``LogDirectory.entries``.
DIRECTORY_FIELDS = 6


def _entries(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    f.tuple_of(f.u64, max_len=DIRECTORY_FIELDS * 65536)(inst, attr, value)
    if len(value) % DIRECTORY_FIELDS:
        raise ValueError(f"{attr.name}: not a whole number of entries")


@message(39)
@attrs.frozen(slots=True)
class LogDirectory:
    """One node's directory entries of a log, oldest partition first: for each,
    ``first_lsn, last_lsn, min_ts_ms, max_ts_ms, bytes, records`` in a flat tuple
    (the copies it holds above the trim point)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    entries: tuple[int, ...] = attrs.field(default=(), converter=f.to_tuple, validator=_entries)


@message(40, "admin")
@attrs.frozen(slots=True)
class Compact:
    """Client → the log's sequencer node: run a compaction pass now."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)


@message(41)
@attrs.frozen(slots=True)
class CompactReply:
    """The pass's stats as a JSON object (``PassStats``), or why it failed."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    stats_json: str = attrs.field(default="{}", validator=f.text(1 << 16))


@message(42, "node")
@attrs.frozen(slots=True)
class DropCopies:
    """Cleaner → a node holding copies: remove, among the copies at or below
    ``end_lsn``, what the offset map supersedes (see ``compaction.drops``).

    ``offsets``: the map's entries, 24 bytes each.  The node first raises its
    clean point to ``end_lsn``, then drops, at most ``rate_bytes_s`` a second
    (0: no limit)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    end_lsn: int = attrs.field(validator=f.u64)
    old_clean_point: int = attrs.field(validator=f.u64)
    tombstone_horizon_ms: int = attrs.field(validator=f.i64)
    rate_bytes_s: int = attrs.field(validator=f.u64)
    offsets: bytes = attrs.field(validator=f.blob)


@message(43)
@attrs.frozen(slots=True)
class DropReply:
    """What one node did for a ``DropCopies``: copies scanned and removed, and
    the bytes it still holds at or below the end."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    scanned: int = attrs.field(default=0, validator=f.u64)
    removed: int = attrs.field(default=0, validator=f.u64)
    removed_bytes: int = attrs.field(default=0, validator=f.u64)
    kept_bytes: int = attrs.field(default=0, validator=f.u64)
    #: How far the node went: ``end_lsn``, or less if its release pointer was
    #: behind (it never touches what it has not seen released).
    done_to: int = attrs.field(default=0, validator=f.u64)


@message(44, "node")
@attrs.frozen(slots=True)
class CleanPoint:
    """Cleaner → nodeset: a pass finished everywhere; the log is clean up to ``lsn``."""

    TYPE_ID: ClassVar[int]
    log_id: int = attrs.field(validator=f.u64)
    lsn: int = attrs.field(validator=f.u64)


@message(46, "node")
@attrs.frozen(slots=True)
class Amend:
    """Node → node (rebuilding): the stored batches of ``log_id`` in
    [first_lsn, last_lsn] whose copyset is ``old_copyset`` now have
    ``copyset`` (a lost copy was re-created elsewhere).  The answer is an
    ``AmendReply``."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    first_lsn: int = attrs.field(validator=f.u64)
    last_lsn: int = attrs.field(validator=f.u64)
    old_copyset: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=255)
    )
    copyset: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=255)
    )

    def __attrs_post_init__(self) -> None:
        if self.first_lsn > self.last_lsn:
            raise ValueError("first_lsn above last_lsn")
        if not self.copyset or len(set(self.copyset)) != len(self.copyset):
            raise ValueError("a copyset names distinct nodes, at least one")


@message(47)
@attrs.frozen(slots=True)
class AmendReply:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    #: Stored batches whose copyset changed.
    amended: int = attrs.field(default=0, validator=f.u32)


#: Logs one ``GetTails`` may ask about.
TAILS_LOGS_MAX = 4096
#: Numbers per log in a ``TailsReply``.
TAILS_FIELDS = 4


@message(51, "read")
@attrs.frozen(slots=True)
class GetTails:
    """Client → node: for each log, what this node knows of its tail (one
    round per node for many logs, where ``LogInfo`` and ``GetSeqState`` take
    one each).  The client needs ``read`` on every log named."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_ids: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u64, TAILS_LOGS_MAX)
    )


@message(52)
@attrs.frozen(slots=True)
class TailsReply:
    """Per log of the ``GetTails``, in its order, ``TAILS_FIELDS`` numbers:
    1 if a sequencer of the log runs on this node (else 0), that sequencer's
    acknowledged tail (0 without one), this node's release pointer and its
    highest stored LSN."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    entries: tuple[int, ...] = attrs.field(
        default=(),
        converter=f.to_tuple,
        validator=f.tuple_of(f.u64, TAILS_LOGS_MAX * TAILS_FIELDS),
    )


#: Logs one ``Renew`` may name.
RENEW_LOGS_MAX = 4096


@message(55, "admin")
@attrs.frozen(slots=True)
class Renew:
    """Client → node: move the sequencers of these logs that run here to a
    new epoch, whose activation chooses the log's nodeset afresh among the
    storage nodes there are now (``logs rebalance``).  Appends are not
    refused: they wait for the new epoch, as at an epoch's last ESN."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_ids: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u64, RENEW_LOGS_MAX)
    )


@message(56)
@attrs.frozen(slots=True)
class RenewReply:
    """Per log of the ``Renew``, in its order: the epoch of the sequencer
    here that moves to a new one (0: none runs here)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    epochs: tuple[int, ...] = attrs.field(
        default=(), converter=f.to_tuple, validator=f.tuple_of(f.u32, RENEW_LOGS_MAX)
    )

"""Wire messages: one frozen attrs class per message type.

Each message type has a fixed number (``TYPE_ID``) that is never reused.  On
the wire a message is the CBOR array ``[type_id, field, field, ...]`` in field
order.  A field holding a ``RecordBatch`` travels as its packed bytes.

Later protocol steps add their messages here; the registry and the codec do
not change.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import attrs

from ..errors import Status
from . import _fields as f
from ._records import RecordBatch

#: The protocol versions this build speaks.  A connection uses the highest
#: version both ends support.
PROTOCOL_VERSION_MIN = 1
PROTOCOL_VERSION_MAX = 1

MESSAGE_TYPES: dict[int, type[Any]] = {}

_M = TypeVar("_M")


def message(type_id: int) -> Any:
    """Register a message class under a fixed type number."""

    def register(cls: type[_M]) -> type[_M]:
        if type_id in MESSAGE_TYPES:
            raise AssertionError(f"message type {type_id} used twice")
        cls.TYPE_ID = type_id  # type: ignore[attr-defined]
        MESSAGE_TYPES[type_id] = cls
        return cls

    return register


def _status(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value not in Status._value2member_map_:
        raise ValueError(f"{attr.name}: unknown status {value!r:.20}")


def _batch(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, RecordBatch):
        raise ValueError(f"{attr.name} must be a RecordBatch")


def _batch_from_wire(value: Any) -> Any:
    # The decoder hands packed bytes; code building messages hands a RecordBatch.
    if type(value) is bytes:
        return RecordBatch.unpack(value)
    return value


@message(1)
@attrs.frozen(slots=True)
class Hello:
    """First message of every connection, from the side that connected."""

    TYPE_ID: ClassVar[int]
    protocol_min: int = attrs.field(validator=f.u16)
    protocol_max: int = attrs.field(validator=f.u16)
    cluster: str = attrs.field(validator=f.text(256))
    #: The connecting node's id, or None for a client.
    node_id: int | None = attrs.field(default=None, validator=f.optional(f.u32))

    def __attrs_post_init__(self) -> None:
        if self.protocol_min > self.protocol_max:
            raise ValueError("protocol_min above protocol_max")


@message(2)
@attrs.frozen(slots=True)
class HelloAck:
    """Answer to ``Hello``: the version chosen, or a status saying why not."""

    TYPE_ID: ClassVar[int]
    status: int = attrs.field(validator=_status)
    protocol: int = attrs.field(validator=f.u16)
    node_id: int | None = attrs.field(default=None, validator=f.optional(f.u32))


@message(3)
@attrs.frozen(slots=True)
class Ping:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)


@message(4)
@attrs.frozen(slots=True)
class Pong:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)


@message(5)
@attrs.frozen(slots=True)
class ErrorReply:
    """A request failed; ``request_id`` names it, ``status`` says why."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    message: str = attrs.field(default="", validator=f.text(4096))


@message(6)
@attrs.frozen(slots=True)
class Records:
    """A batch of records of one log, packed compactly (one message, many records)."""

    TYPE_ID: ClassVar[int]
    log_id: int = attrs.field(validator=f.u64)
    batch: RecordBatch = attrs.field(converter=_batch_from_wire, validator=_batch)


@message(10)
@attrs.frozen(slots=True)
class Append:
    """Client → sequencer node: append a batch of records to one log.

    The batch's LSNs, timestamps and flags are ignored: the sequencer assigns
    consecutive LSNs and stamps the time.
    """

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    batch: RecordBatch = attrs.field(converter=_batch_from_wire, validator=_batch)


@message(11)
@attrs.frozen(slots=True)
class AppendReply:
    """The records of an ``Append`` got LSNs ``first_lsn .. first_lsn + count - 1``.

    On failure ``status`` says why; with REDIRECTED, ``redirect`` names the
    node that runs the log's sequencer.
    """

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    first_lsn: int = attrs.field(default=0, validator=f.u64)
    count: int = attrs.field(default=0, validator=f.u32)
    timestamp_ms: int = attrs.field(default=0, validator=f.u64)
    redirect: int | None = attrs.field(default=None, validator=f.optional(f.u32))
    message: str = attrs.field(default="", validator=f.text(1024))


@message(12)
@attrs.frozen(slots=True)
class Store:
    """Sequencer → storage node: keep a copy of these records.

    ``wave`` counts the sequencer's attempts for these records (or carries the
    recovery's seal epoch); ``released_lsn`` is the sequencer's release
    pointer (the node may take everything up to it as released; never more
    than what is fully stored, and nothing before recovery is done).
    """

    TYPE_ID: ClassVar[int]
    store_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    wave: int = attrs.field(validator=f.u32)
    copyset: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=255)
    )
    released_lsn: int = attrs.field(validator=f.u64)
    sync: bool = attrs.field(validator=f.boolean)
    batch: RecordBatch = attrs.field(converter=_batch_from_wire, validator=_batch)
    #: Non-zero for a recovery's writes: its seal epoch, which lets them into a
    #: sealed epoch (a node takes them while this is above its seal).
    recovery_seal: int = attrs.field(default=0, validator=f.u32)

    def __attrs_post_init__(self) -> None:
        if not self.copyset:
            raise ValueError("empty copyset")
        lsns = self.batch.lsns
        if lsns and lsns[0] >> 32 != lsns[-1] >> 32:
            raise ValueError("a STORE carries records of one epoch")


@message(13)
@attrs.frozen(slots=True)
class StoreReply:
    TYPE_ID: ClassVar[int]
    store_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)


@message(14)
@attrs.frozen(slots=True)
class Release:
    """Sequencer → nodeset: records of ``log_id`` up to ``lsn`` may be delivered."""

    TYPE_ID: ClassVar[int]
    log_id: int = attrs.field(validator=f.u64)
    lsn: int = attrs.field(validator=f.u64)


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


@message(28)
@attrs.frozen(slots=True)
class GetSeqState:
    """Client → the log's sequencer node: make sure a sequencer runs for the log
    (activating one if needed) and answer with its state (``SeqState``)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)


@message(29)
@attrs.frozen(slots=True)
class SeqState:
    """The answer to ``GetSeqState``: the log's tail as its sequencer knows it
    (every acknowledged append, released or not), its epoch, and how the
    recovery of the earlier epochs stands."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    tail_lsn: int = attrs.field(default=0, validator=f.u64)
    epoch: int = attrs.field(default=0, validator=f.u32)
    recovered: bool = attrs.field(default=True, validator=f.boolean)
    #: Milliseconds since activation while the recovery is not done (else 0).
    recovering_ms: int = attrs.field(default=0, validator=f.u64)
    #: The recovery is past the node's bound: appends are refused meanwhile.
    stalled: bool = attrs.field(default=False, validator=f.boolean)
    attempts_failed: int = attrs.field(default=0, validator=f.u32)
    error: str = attrs.field(default="", validator=f.text(4096))
    #: With a status other than OK: why.
    message: str = attrs.field(default="", validator=f.text(4096))
    #: What the sequencer's node has released: storage nodes that asked
    #: because a release was overdue take it as their release pointer.
    released_lsn: int = attrs.field(default=0, validator=f.u64)


@message(30)
@attrs.frozen(slots=True)
class Seal:
    """New sequencer → node: refuse every STORE of ``log_id`` in an epoch at or
    below ``seal_epoch`` from now on (persisted before the reply)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    seal_epoch: int = attrs.field(validator=f.u32)


@message(31)
@attrs.frozen(slots=True)
class SealReply:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    seal_epoch: int = attrs.field(validator=f.u32)


@message(32)
@attrs.frozen(slots=True)
class GetDigest:
    """Recovery → node: your copies of epoch ``epoch`` from ``start_esn`` on,
    released or not.  The node first seals the log up to ``seal_epoch``, so
    that nothing older lands on it after it answered."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    epoch: int = attrs.field(validator=f.u32)
    start_esn: int = attrs.field(validator=f.u32)
    seal_epoch: int = attrs.field(default=0, validator=f.u32)


@message(33)
@attrs.frozen(slots=True)
class Digest:
    """A node's copies for a recovery, with each copy's wave (precedence).
    ``complete``: nothing more in the epoch after these."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    complete: bool = attrs.field(validator=f.boolean)
    waves: tuple[int, ...] = attrs.field(converter=f.to_tuple, validator=f.tuple_of(f.u32))
    batch: RecordBatch = attrs.field(converter=_batch_from_wire, validator=_batch)

    def __attrs_post_init__(self) -> None:
        if len(self.waves) != len(self.batch):
            raise ValueError("one wave per record")


@message(34)
@attrs.frozen(slots=True)
class Trim:
    """Client → node: move the log's trim point up to ``lsn`` (never down)."""

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


@message(36)
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


@message(38)
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


@message(40)
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


@message(42)
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


@message(44)
@attrs.frozen(slots=True)
class CleanPoint:
    """Cleaner → nodeset: a pass finished everywhere; the log is clean up to ``lsn``."""

    TYPE_ID: ClassVar[int]
    log_id: int = attrs.field(validator=f.u64)
    lsn: int = attrs.field(validator=f.u64)


def choose_version(peer_min: int, peer_max: int) -> int | None:
    """The highest version both ends speak, or None when the ranges do not overlap."""
    top = min(peer_max, PROTOCOL_VERSION_MAX)
    if top < max(peer_min, PROTOCOL_VERSION_MIN):
        return None
    return top

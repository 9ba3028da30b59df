"""Wire messages of operations: trims, node status, partition directories,
compaction."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from . import _fields as f
from ._registry import _status, message


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

"""Consumer positions: what a group has processed, per log.  Pure, no I/O.

A position says that group ``g`` has processed log ``L`` up to and including
LSN ``lsn``.  Positions are records of one internal compacted log
(``records.POSITIONS_LOG_ID``), keyed by (group, log): the latest record of a
key is the position, a tombstone removes it, and compaction keeps the log as
small as the number of keys.  Reading that log from its start, in LSN order,
and applying each record to a ``PositionTable`` gives every position.

Kafka keeps committed offsets the same way (its ``__consumer_offsets`` topic,
keyed by group, topic and partition); here any client reads the log itself
instead of asking a group coordinator.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..errors import InvalidArgumentError
from ..records import GROUP_RE as GROUP_RE
from ..records import LOG_ID_MAX, check_log_id
from ..records import positions_log_of as positions_log_of
from ..types import LSN_MAX, lsn_epoch, lsn_esn

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..epochstore._model import EpochEnd

_LOG = struct.Struct(">Q")
#: A position's value: format version, the LSN, when it was committed (ms).
_VALUE = struct.Struct("<BQQ")
_VERSION: Final = 1
#: A Kafka consumer's commit: version 2, the LSN, the time, the Kafka offset,
#: then its metadata string (UTF-8, the rest of the value).
_VALUE_KAFKA = struct.Struct("<BQQq")
_VERSION_KAFKA: Final = 2
#: Kafka's offset.metadata.max.bytes.
METADATA_MAX: Final = 4096
#: The key of a group's membership record ends so: a log id no log has.
_MEMBERSHIP: Final = b"\x00" + b"\xff" * 8
#: Keys of transactions' records in the positions log (``groups._txns``)
#: start with a byte no group name starts with (a letter or digit first):
#: a transactional id's state, and the positions a transaction of producer
#: id P holds for a group until it ends (TxnOffsetCommit).
_TXN_STATE: Final = b"\x01"
_TXN_POSITIONS: Final = b"\x02"
_PID = struct.Struct(">q")
#: Epochs that ``records_between`` walks at most (each is an epoch store read).
EPOCHS_WALKED_MAX: Final = 1000


def check_group(group: object) -> str:
    """``group`` if it names a consumer group.

    Raises:
        InvalidArgumentError: not 1-128 of letters, digits and ``_.@:-``.
    """
    if not isinstance(group, str) or not GROUP_RE.fullmatch(group):
        raise InvalidArgumentError(
            f"bad group name {group!r}: 1-128 of letters, digits and _.@:- (not first)"
        )
    return group


def encode_key(group: str, log_id: int) -> bytes:
    """The key of (group, log) in the positions log: the group's name, a zero
    byte, the log id big-endian (so one group's keys sort together)."""
    check_group(group)
    check_log_id(log_id)
    return group.encode() + b"\x00" + _LOG.pack(log_id)


def decode_key(key: bytes) -> tuple[str, int] | None:
    """(group, log) of a key, or None for a key that is not a position's."""
    cut = len(key) - _LOG.size
    if cut < 2 or key[cut - 1] != 0:
        return None
    name, log = key[: cut - 1], key[cut:]
    try:
        group = name.decode()
    except UnicodeDecodeError:
        return None
    (log_id,) = _LOG.unpack(log)
    if not GROUP_RE.fullmatch(group) or not 1 <= log_id <= LOG_ID_MAX:
        return None
    return group, log_id


def group_of_key(key: bytes | None) -> str | None:
    """The group a key of the positions log belongs to (a position's or the
    group's membership record), or None for a key that is neither."""
    if key is None or len(key) < 2 + _LOG.size or key[-_LOG.size - 1] != 0:
        return None
    try:
        group = key[: -_LOG.size - 1].decode()
    except UnicodeDecodeError:
        return None
    return group if GROUP_RE.fullmatch(group) else None


def membership_key(group: str) -> bytes:
    """The key of ``group``'s membership record (its coordinator writes it)."""
    return check_group(group).encode() + _MEMBERSHIP


def txn_state_key(txn_id: str) -> bytes:
    """The key of a transactional id's state (its coordinator writes it)."""
    return _TXN_STATE + txn_id.encode()


def txn_positions_key(group: str, producer_id: int) -> bytes:
    """The key of the positions producer ``producer_id``'s open transaction
    holds for ``group``: committed as positions when it commits, dropped
    when it aborts."""
    return _TXN_POSITIONS + _PID.pack(producer_id) + check_group(group).encode()


def group_of_txn_key(key: bytes | None) -> str | None:
    """The group of a ``txn_positions_key``, or None for any other key."""
    if key is None or key[:1] != _TXN_POSITIONS or len(key) <= 1 + _PID.size:
        return None
    try:
        group = key[1 + _PID.size :].decode()
    except UnicodeDecodeError:
        return None
    return group if GROUP_RE.fullmatch(group) else None


@attrs.frozen
class Position:
    """Group ``group`` has processed log ``log_id`` up to and including ``lsn``
    (0: nothing yet, after a reset to the earliest record).  A Kafka
    consumer's commit also keeps its offset (the next one to read) and
    metadata string, given back as they were."""

    group: str
    log_id: int
    lsn: int
    committed_ms: int
    offset: int | None = None
    metadata: str | None = None


def encode_value(
    lsn: int, committed_ms: int, offset: int | None = None, metadata: str | None = None
) -> bytes:
    if type(lsn) is not int or not 0 <= lsn <= LSN_MAX:
        raise InvalidArgumentError(f"bad LSN {lsn!r} for a position")
    if offset is None:
        return _VALUE.pack(_VERSION, lsn, max(0, committed_ms))
    text = (metadata or "").encode()
    if len(text) > METADATA_MAX:
        raise InvalidArgumentError(f"commit metadata of {len(text)} bytes: {METADATA_MAX} at most")
    return _VALUE_KAFKA.pack(_VERSION_KAFKA, lsn, max(0, committed_ms), offset) + text


def decode_value(payload: bytes) -> tuple[int, int, int | None, str | None] | None:
    """(lsn, committed_ms, offset, metadata), or None for a value this
    version cannot read."""
    if len(payload) == _VALUE.size and payload[0] == _VERSION:
        _, lsn, committed_ms = _VALUE.unpack(payload)
        return lsn, committed_ms, None, None
    if len(payload) >= _VALUE_KAFKA.size and payload[0] == _VERSION_KAFKA:
        _, lsn, committed_ms, offset = _VALUE_KAFKA.unpack_from(payload)
        try:
            metadata = payload[_VALUE_KAFKA.size :].decode()
        except UnicodeDecodeError:
            return None
        return lsn, committed_ms, offset, metadata
    return None


class PositionTable:
    """Every (group, log) position, built by applying the positions log in LSN
    order.  ``read_through`` is the last LSN of that log applied."""

    def __init__(self) -> None:
        self.positions: dict[tuple[str, int], Position] = {}
        #: Group -> its latest membership record (``membership_key``).
        self.memberships: dict[str, bytes] = {}
        #: Transactional id -> its state (``txn_state_key``).
        self.txns: dict[str, bytes] = {}
        #: (group, producer id) -> the positions its open transaction holds.
        self.txn_positions: dict[tuple[str, int], bytes] = {}
        self.read_through = 0

    def apply(self, lsn: int, key: bytes | None, payload: bytes | None) -> None:
        """Apply one record of the positions log (tombstone: ``payload`` None)."""
        self.read_through = max(self.read_through, lsn)
        if key is not None and key[:1] in (_TXN_STATE, _TXN_POSITIONS):
            self._apply_txn(key, payload)
            return
        if key is not None and key.endswith(_MEMBERSHIP):
            name = key[: -len(_MEMBERSHIP)].decode(errors="replace")
            if payload is None:
                self.memberships.pop(name, None)
            else:
                self.memberships[name] = payload
            return
        decoded = decode_key(key) if key is not None else None
        if decoded is None:
            return  # not a position (written by something else): skipped
        if payload is None:
            self.positions.pop(decoded, None)
            return
        value = decode_value(payload)
        if value is not None:
            lsn_of, ms, offset, metadata = value
            self.positions[decoded] = Position(*decoded, lsn_of, ms, offset, metadata)

    def _apply_txn(self, key: bytes, payload: bytes | None) -> None:
        if key[:1] == _TXN_STATE:
            _put(self.txns, key[1:].decode(errors="replace"), payload)
        elif len(key) > 1 + _PID.size:
            (pid,) = _PID.unpack_from(key, 1)
            group = key[1 + _PID.size :].decode(errors="replace")
            _put(self.txn_positions, (group, pid), payload)

    def advance(self, lsn: int) -> None:
        """Nothing else to apply up to ``lsn`` (a gap, or the tail)."""
        self.read_through = max(self.read_through, lsn)

    def get(self, group: str, log_id: int) -> Position | None:
        return self.positions.get((group, log_id))

    def groups(self) -> dict[str, list[Position]]:
        """Every group with its positions, both sorted."""
        out: dict[str, list[Position]] = {}
        for (group, _), position in sorted(self.positions.items()):
            out.setdefault(group, []).append(position)
        return out

    def of_group(self, group: str) -> list[Position]:
        return [p for (g, _), p in sorted(self.positions.items()) if g == group]


def _put(table: dict[Any, bytes], name: object, payload: bytes | None) -> None:
    if payload is None:
        table.pop(name, None)
    else:
        table[name] = payload


def records_between(after: int, tail: int, ends: Mapping[int, EpochEnd | None]) -> int:
    """About how many records lie above LSN ``after`` up to ``tail``.

    Within one epoch, ESNs are dense: the difference of ESNs counts the
    records (and the holes recovery plugged, which are few).  An epoch that
    recovery ended holds ESNs up to below its bridge (``ends[epoch]``); an
    epoch missing from ``ends`` or with no end held nothing.  The caller
    gives the ends of the epochs strictly between the two LSNs' epochs (and
    of the first epoch when it differs from the tail's).
    """
    if tail <= after:
        return 0
    first_epoch, first_esn = lsn_epoch(after), lsn_esn(after)
    last_epoch, last_esn = lsn_epoch(tail), lsn_esn(tail)
    if first_epoch == last_epoch:
        return last_esn - first_esn
    total = last_esn
    for epoch in range(first_epoch, last_epoch):
        end = ends.get(epoch)
        if end is None:
            continue
        top = end.bridge_esn - 1
        low = first_esn if epoch == first_epoch else 0
        total += max(0, top - low)
    return total


def epochs_to_walk(after: int, tail: int) -> range:
    """The epochs whose ends ``records_between`` needs (at most ``EPOCHS_WALKED_MAX``,
    the most recent: older ones count as empty)."""
    first_epoch, last_epoch = lsn_epoch(after), lsn_epoch(tail)
    return range(max(first_epoch, last_epoch - EPOCHS_WALKED_MAX), last_epoch)


@attrs.frozen
class GroupLag:
    """How far a group is behind on one log."""

    group: str
    log_id: int
    #: Processed up to and including this LSN (None: never committed).
    committed: int | None
    committed_ms: int | None
    tail: int
    #: About how many records lie above the committed LSN (``records_between``).
    lag_records: int
    #: The age of the first record above the committed LSN (0: none).
    lag_ms: int
    #: The Kafka offset a Kafka consumer committed (None: a native commit).
    offset: int | None = None

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


def lag_of(
    position: Position | None,
    tail: int,
    ends: Mapping[int, EpochEnd | None],
    first_unread_ms: int | None,
    now_ms: int,
    *,
    group: str,
    log_id: int,
) -> GroupLag:
    """A group's lag on a log from its position, the log's tail, the epoch
    ends between them and the timestamp of the first unread record."""
    after = position.lsn if position is not None else 0
    lag_ms = 0 if first_unread_ms is None else max(0, now_ms - first_unread_ms)
    return GroupLag(
        group,
        log_id,
        None if position is None else position.lsn,
        None if position is None else position.committed_ms,
        tail,
        records_between(after, tail, ends),
        lag_ms,
        None if position is None else position.offset,
    )


def reset_target(
    how: str, *, lsn: int | None = None, found: int | None = None, tail: int | None = None
) -> int:
    """The committed LSN a reset sets (the next read starts right after it).

    ``how``: ``lsn`` (the next read starts at ``lsn``), ``time`` (at ``found``,
    the first LSN at or after the time), ``earliest`` or ``latest`` (after
    ``tail``, the log's tail now).
    """
    if how == "earliest":
        return 0
    if how == "latest":
        assert tail is not None
        return tail
    start = lsn if how == "lsn" else found
    if start is None or not 1 <= start <= LSN_MAX:
        raise InvalidArgumentError(f"bad LSN {start!r} to reset to")
    return start - 1


def last_lsn_of(items: Iterable[object]) -> int | None:
    """The highest LSN a batch of reader items covers (``RecordRun`` columns or gaps)."""
    last = None
    for item in items:
        top = getattr(item, "last_lsn", None)
        last = int(item.hi if top is None else top)  # type: ignore[attr-defined]
    return last

"""The record vocabulary: what a record is, wherever it is (pure, no I/O).

One definition, imported by the wire, LogsDB, the sequencer, the nodes and the
client:

* ``RecordBatch``: the columns of one batch of records of a log, and its packed
  form (one bytes value, not one CBOR map per record);
* ``RecordFlags``: what a copy is (a hole plug, a bridge, a tombstone, written by
  recovery);
* ``precedence``: which of two differing copies of one LSN wins, for recovery
  and readers alike;
* the limits: key and payload sizes, ESN and epoch bounds, log ids.

Packed layout of a batch (all integers big-endian)::

    u32 count
    u64 lsn[count]
    u64 timestamp_ms[count]
    u16 flags[count]
    i32 key_len[count]       (-1: no key)
    i32 payload_len[count]   (-1: tombstone, payload None)
    key bytes, concatenated
    payload bytes, concatenated
"""

from __future__ import annotations

import enum
import struct
from typing import TYPE_CHECKING, Final

import attrs

from .errors import InvalidArgumentError, ProtocolError

if TYPE_CHECKING:
    from collections.abc import Sequence


class RecordFlags(enum.IntFlag):
    """Flags of a record copy (u16; the low byte travels in ``RecordBatch.flags``)."""

    #: A hole plug: recovery found no copy of a record that was never acknowledged.
    HOLE = 0x0001
    #: The end of an epoch (always with HOLE): the next record is in a later epoch.
    BRIDGE = 0x0002
    #: A keyed delete: the payload is None.
    TOMBSTONE = 0x0004
    #: Written by a recovery, whose seal epoch is the copy's wave.
    WRITTEN_BY_RECOVERY = 0x0008
    #: A copy re-created by rebuilding (the record's LSN and timestamp kept).
    WRITTEN_BY_REBUILDING = 0x0010


#: The flags that travel with records (the high byte is LogsDB's own).
FLAGS_PUBLIC_MASK: Final = 0x00FF

# The flags as plain ints, for loops over records: with an IntFlag operand,
# ``flags & FLAG`` goes through enum's Python-level ``__rand__``, ten times slower.
HOLE: Final = int(RecordFlags.HOLE)
BRIDGE: Final = int(RecordFlags.BRIDGE)
TOMBSTONE: Final = int(RecordFlags.TOMBSTONE)
WRITTEN_BY_RECOVERY: Final = int(RecordFlags.WRITTEN_BY_RECOVERY)
WRITTEN_BY_REBUILDING: Final = int(RecordFlags.WRITTEN_BY_REBUILDING)

#: A key is at most this long (LogsDB stores its length in a u16).
KEY_BYTES_MAX: Final = 0xFFFF
#: A node's default limit on one payload (``--payload-bytes-max``).
PAYLOAD_BYTES_MAX: Final = 1024 * 1024
#: ESNs of an epoch run 1..ESN_MAX (ESN 0 is never a record).
ESN_MAX: Final = 2**32 - 1
#: Epochs run 1..EPOCH_MAX.
EPOCH_MAX: Final = 2**32 - 1
#: User log ids run 1..LOG_ID_MAX; the top bit marks internal logs.
LOG_ID_INTERNAL_BIT: Final = 1 << 63
LOG_ID_MAX: Final = LOG_ID_INTERNAL_BIT - 1
#: The internal compacted log of consumer positions (``logstrand.positions``).
POSITIONS_LOG_ID: Final = LOG_ID_INTERNAL_BIT | 1
#: The internal logs that exist: clients read and append to them like any log.
INTERNAL_LOGS: Final = frozenset({POSITIONS_LOG_ID})
#: Nodes in one copyset, at most.
COPYSET_SIZE_MAX: Final = 0xFF


def precedence(flags: int, wave: int) -> tuple[int, int]:
    """Which of two differing copies of one LSN wins: the higher value.

    A copy written by a recovery beats every copy of the epoch's own sequencer,
    and a later recovery (a higher seal epoch, its wave) an earlier one.  Copies
    of the sequencer differ only by their store wave and carry the same record.
    Recovery decides with this, and readers choose between copies with it.
    """
    return (1 if flags & WRITTEN_BY_RECOVERY else 0, wave)


def check_log_id(log_id: int, *, internal: bool = False) -> int:
    """``log_id`` if it names a log: a user's, one of ``INTERNAL_LOGS``, or
    with ``internal`` any id with the top bit set.

    Raises:
        InvalidArgumentError: not an int, zero, negative, too large, or internal.
    """
    if type(log_id) is not int:
        raise InvalidArgumentError(f"log id must be an int, got {type(log_id).__name__}")
    top = 2**64 - 1 if internal else LOG_ID_MAX
    if not 0 < log_id <= top and log_id not in INTERNAL_LOGS:
        raise InvalidArgumentError(f"log id {log_id} out of range 1..{top}")
    return log_id


_COUNT = struct.Struct(">I")
_COUNT_MAX = 1 << 24
_FLAGS_MAX = 0xFFFF
_U64_MAX = 2**64 - 1


def _check_u64_list(name: str, values: Sequence[int]) -> None:
    for v in values:
        if type(v) is not int or not 0 <= v <= _U64_MAX:
            raise ValueError(f"{name} must be u64 ints")


@attrs.frozen(slots=True)
class RecordBatch:
    """Columns of one batch of records of a single log.

    ``payloads[i] is None`` marks a tombstone.  All sequences have one entry per
    record.
    """

    lsns: tuple[int, ...]
    timestamps_ms: tuple[int, ...]
    flags: tuple[int, ...]
    keys: tuple[bytes | None, ...]
    payloads: tuple[bytes | None, ...]

    def __attrs_post_init__(self) -> None:
        n = len(self.lsns)
        if n > _COUNT_MAX:
            raise ValueError(f"batch of {n} records is over the limit {_COUNT_MAX}")
        if not (
            len(self.timestamps_ms) == len(self.flags) == len(self.keys) == len(self.payloads) == n
        ):
            raise ValueError("record batch columns differ in length")
        _check_u64_list("lsns", self.lsns)
        _check_u64_list("timestamps_ms", self.timestamps_ms)
        for f in self.flags:
            if type(f) is not int or not 0 <= f <= _FLAGS_MAX:
                raise ValueError("flags must be u16 ints")
        for k in self.keys:
            if k is not None and type(k) is not bytes:
                raise ValueError("keys must be bytes or None")
        for p in self.payloads:
            if p is not None and type(p) is not bytes:
                raise ValueError("payloads must be bytes or None")

    def __len__(self) -> int:
        return len(self.lsns)

    @classmethod
    def trusted(
        cls,
        lsns: tuple[int, ...],
        timestamps_ms: tuple[int, ...],
        flags: tuple[int, ...],
        keys: tuple[bytes | None, ...],
        payloads: tuple[bytes | None, ...],
    ) -> RecordBatch:
        """Build a batch from columns already known to be valid, without checking them.

        For the hot path only: columns that came out of ``unpack`` (whose
        struct formats guarantee the ranges) or out of a validated batch.
        """
        batch = object.__new__(cls)
        object.__setattr__(batch, "lsns", lsns)
        object.__setattr__(batch, "timestamps_ms", timestamps_ms)
        object.__setattr__(batch, "flags", flags)
        object.__setattr__(batch, "keys", keys)
        object.__setattr__(batch, "payloads", payloads)
        return batch

    def take(self, indices: Sequence[int]) -> RecordBatch:
        """The records at ``indices``, in that order."""
        return RecordBatch.trusted(
            tuple(self.lsns[i] for i in indices),
            tuple(self.timestamps_ms[i] for i in indices),
            tuple(self.flags[i] for i in indices),
            tuple(self.keys[i] for i in indices),
            tuple(self.payloads[i] for i in indices),
        )

    @property
    def payload_bytes(self) -> int:
        return sum(len(p) for p in self.payloads if p is not None)

    def pack(self) -> bytes:
        n = len(self.lsns)
        key_lens = [-1 if k is None else len(k) for k in self.keys]
        payload_lens = [-1 if p is None else len(p) for p in self.payloads]
        head = struct.pack(
            f">I{n}Q{n}Q{n}H{n}i{n}i",
            n,
            *self.lsns,
            *self.timestamps_ms,
            *self.flags,
            *key_lens,
            *payload_lens,
        )
        parts = [head]
        parts.extend(k for k in self.keys if k)
        parts.extend(p for p in self.payloads if p)
        return b"".join(parts)

    @classmethod
    def unpack(cls, data: bytes) -> RecordBatch:
        """Decode a packed batch.

        Raises:
            ProtocolError: truncated, trailing or inconsistent bytes.
        """
        if len(data) < _COUNT.size:
            raise ProtocolError("record batch truncated before its count")
        (n,) = _COUNT.unpack_from(data, 0)
        if n > _COUNT_MAX:
            raise ProtocolError(f"record batch count {n} over the limit")
        head_size = 4 + n * (8 + 8 + 2 + 4 + 4)
        if len(data) < head_size:
            raise ProtocolError("record batch truncated in its header")
        cols = struct.unpack_from(f">{n}Q{n}Q{n}H{n}i{n}i", data, 4)
        lsns = cols[0:n]
        timestamps = cols[n : 2 * n]
        flags = cols[2 * n : 3 * n]
        key_lens = cols[3 * n : 4 * n]
        payload_lens = cols[4 * n : 5 * n]
        pos = head_size
        end = len(data)
        keys: list[bytes | None] = []
        for kl in key_lens:
            if kl < 0:
                if kl != -1:
                    raise ProtocolError("bad key length in record batch")
                keys.append(None)
                continue
            if pos + kl > end:
                raise ProtocolError("record batch truncated in its keys")
            keys.append(data[pos : pos + kl])
            pos += kl
        payloads: list[bytes | None] = []
        for pl in payload_lens:
            if pl < 0:
                if pl != -1:
                    raise ProtocolError("bad payload length in record batch")
                payloads.append(None)
                continue
            if pos + pl > end:
                raise ProtocolError("record batch truncated in its payloads")
            payloads.append(data[pos : pos + pl])
            pos += pl
        if pos != end:
            raise ProtocolError(f"{end - pos} trailing bytes after record batch")
        # The struct formats above bound every number: no need to check again.
        return cls.trusted(lsns, timestamps, flags, tuple(keys), tuple(payloads))


def make_batch(
    lsns: Sequence[int],
    payloads: Sequence[bytes | None],
    *,
    timestamps_ms: Sequence[int] | int,
    keys: Sequence[bytes | None] | None = None,
    flags: Sequence[int] | int = 0,
) -> RecordBatch:
    """A RecordBatch from plain sequences; scalar timestamps and flags apply to all."""
    n = len(lsns)
    return RecordBatch(
        tuple(lsns),
        tuple(timestamps_ms) if not isinstance(timestamps_ms, int) else (timestamps_ms,) * n,
        tuple(flags) if not isinstance(flags, int) else (flags,) * n,
        tuple(keys) if keys is not None else (None,) * n,
        tuple(payloads),
    )

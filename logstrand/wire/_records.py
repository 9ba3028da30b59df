"""Compact packing of a batch of records for the wire.

A batch travels as one bytes value, not as one CBOR map per record: a fixed
header, then columns of fixed-width numbers, then the keys and payloads
concatenated.  Packing and unpacking cost a handful of ``struct`` calls per
batch plus one slice per key and payload.

Layout (all integers big-endian)::

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

import struct
from typing import TYPE_CHECKING

import attrs

from ..errors import ProtocolError

if TYPE_CHECKING:
    from collections.abc import Sequence

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

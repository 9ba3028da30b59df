"""How a packed batch is built (``_packed`` describes the layout): from a
body and header fields, from a client's records, from columns, and anew
from another batch with a new header (a sequencer's wave, a rebuilt copy's
copyset) or fewer records.  A mixin of ``PackedBatch``: every batch made
here is checked as ``PackedBatch.parse`` checks what comes off the wire, or
(a client's records, ``restamp``) made field by field from what was checked."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from ..errors import InvalidArgumentError, ProtocolError
from ..records import FLAGS_APPENDED, TOMBSTONE
from ._compression import Codec, pack_body
from ._extras import none_if_empty
from ._layout import (
    EXTRAS,
    FLAGS,
    LSNS,
    PRODUCER,
    TIMESTAMPS,
    Head,
    check_lengths,
    check_size,
    header,
    payload_bytes_of,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self, Unpack


class Columns(NamedTuple):
    """A batch's records as columns (a view to read them by, not a format:
    ``PackedBatch.columns``); ``payloads[i] is None`` is a tombstone."""

    lsns: list[int]
    timestamps_ms: list[int]
    flags: list[int]
    keys: list[bytes | None]
    payloads: list[bytes | None]
    #: Every record's extras (``_extras``: headers, a create time), or None
    #: when no record has any.
    extras: list[bytes | None] | None = None

    def take(self, indices: Sequence[int]) -> Columns:
        """The records at ``indices``, in that order."""
        extras = self.extras
        return Columns(
            [self.lsns[i] for i in indices],
            [self.timestamps_ms[i] for i in indices],
            [self.flags[i] for i in indices],
            [self.keys[i] for i in indices],
            [self.payloads[i] for i in indices],
            None if extras is None else none_if_empty([extras[i] for i in indices]),
        )


class Building:
    """The building half of ``PackedBatch`` (its fields and readers are there)."""

    __slots__ = ()

    # The fields (``PackedBatch`` has their slots and fills them in).
    data: bytes
    count: int
    first_lsn: int
    last_lsn: int
    timestamp_ms: int
    wave: int
    flags0: int
    codec: int
    layout: int
    copyset: tuple[int, ...]
    body_start: int
    raw_len: int
    body_crc: int
    payload_bytes: int
    #: (producer id, sequence number of the first record), or None.
    producer: tuple[int, int] | None
    _lens: list[int] | None
    _blob: bytes | None

    @classmethod
    def parse(cls, data: bytes) -> Self:
        raise NotImplementedError

    def lsns(self) -> list[int]:
        raise NotImplementedError

    def timestamps(self) -> list[int]:
        raise NotImplementedError

    def flags(self) -> list[int]:
        raise NotImplementedError

    def payload_lens(self) -> list[int]:
        raise NotImplementedError

    def columns(self) -> Columns:
        raise NotImplementedError

    @classmethod
    def assemble(
        cls, body: bytes, raw_len: int, body_crc: int, codec: int, count: int, **head: Unpack[Head]
    ) -> Self:
        """A batch from a body and the header fields, checked as ``parse`` does."""
        return cls.parse(header(len(body), raw_len, body_crc, codec, count, **head) + body)

    @classmethod
    def for_append(
        cls,
        keys: Sequence[bytes | None],
        payloads: Sequence[bytes | None],
        codec: int = 0,
        producer: tuple[int, int] | None = None,
        extras: Sequence[bytes | None] | None = None,
        flags: int = 0,
    ) -> Self:
        """What a client appends: the records' body (compressed with ``codec``
        when that helps) under a header the sequencer replaces, but for the
        ``producer`` (id, first sequence number) of an idempotent append,
        whether the body has ``extras`` (``_extras``) and the appender's
        ``flags`` of every record (``FLAGS_APPENDED``: a transaction's)."""
        extras = none_if_empty(extras)
        body, raw_len, crc, used = pack_body(keys, payloads, codec, extras)
        n = len(payloads) * (3 if extras is not None else 2)
        lens = memoryview(body)[: 4 * n].cast("i").tolist()  # packed here: no check
        return cls.for_body(
            body, raw_len, crc, used, len(payloads), producer, extras is not None, lens, flags
        )

    @classmethod
    def for_body(
        cls,
        body: bytes,
        raw_len: int,
        crc: int,
        codec: int,
        count: int,
        producer: tuple[int, int] | None = None,
        extras: bool = False,
        lens: list[int] | None = None,
        flags: int = 0,
    ) -> Self:
        """``for_append`` of a body packed already (``pack_body``'s four
        values and the record count): a client that has the lengths and the
        bytes in its own buffers (Arrow columns) packs without a Python
        object per record.  The lengths table is checked as ``parse`` does."""
        check_size(count, raw_len)
        head = header(
            len(body),
            raw_len,
            crc,
            codec,
            count,
            first_lsn=0,
            timestamps_ms=0,
            flags=flags,
            producer=producer,
            extras=extras,
        )
        # Made here from checked columns: not parsed back (that was a third
        # of the cost of a one-record append's batch).  ``test_packed``
        # holds it to what ``parse`` makes of the same bytes.
        b: Any = cls.__new__(cls)
        if lens is None:
            lens = check_lengths(body, 0, count * (3 if extras else 2), raw_len)
        b.data = head + body
        b.count = count
        b.first_lsn, b.last_lsn, b.timestamp_ms, b.wave, b.flags0 = 0, count - 1, 0, 0, flags
        b.codec = codec
        b.layout = (PRODUCER if producer is not None else 0) | (EXTRAS if extras else 0)
        b.copyset = ()
        b.body_start = len(head)
        b.raw_len, b.body_crc, b.producer = raw_len, crc, producer
        b._blob, b._lens = None, lens
        b.payload_bytes = payload_bytes_of(lens, count)
        return cast("Self", b)

    @classmethod
    def of_columns(
        cls,
        lsns: Sequence[int],
        payloads: Sequence[bytes | None],
        *,
        timestamps_ms: Sequence[int] | int,
        keys: Sequence[bytes | None] | None = None,
        flags: Sequence[int] | int = 0,
        wave: int = 0,
        copyset: tuple[int, ...] = (),
        codec: int = Codec.NONE,
        producer: tuple[int, int] | None = None,
        extras: Sequence[bytes | None] | None = None,
    ) -> Self:
        """A batch of these records, their LSNs (increasing), timestamps and
        flags kept (a ``None`` payload gets the TOMBSTONE flag, others lose
        it); scalar timestamps and flags apply to every record.

        Raises:
            InvalidArgumentError: no records, or columns of different lengths.
            ProtocolError: a value out of its range (LSNs not increasing...).
        """
        n = len(lsns)
        if not n:
            raise InvalidArgumentError("an empty batch cannot be packed")
        if len(payloads) != n or (keys is not None and len(keys) != n):
            raise InvalidArgumentError("batch columns differ in length")
        stamps = [timestamps_ms] * n if isinstance(timestamps_ms, int) else list(timestamps_ms)
        given = [flags] * n if isinstance(flags, int) else list(flags)
        if len(stamps) != n or len(given) != n:
            raise InvalidArgumentError("batch columns differ in length")
        marked = [
            f | TOMBSTONE if p is None else f & ~TOMBSTONE
            for f, p in zip(given, payloads, strict=True)
        ]
        extras = none_if_empty(extras)
        body, raw_len, crc, used = pack_body(keys or [None] * n, payloads, codec, extras)
        try:
            return cls.assemble(
                body,
                raw_len,
                crc,
                used,
                n,
                first_lsn=lsns[0],
                lsns=lsns,
                timestamps_ms=stamps,
                flags=marked,
                wave=wave,
                copyset=copyset,
                producer=producer,
                extras=extras is not None,
            )
        except struct.error as exc:
            raise ProtocolError(f"a batch field is out of its range: {exc}") from None

    def restamp(
        self, *, first_lsn: int, timestamp_ms: int, wave: int, copyset: tuple[int, ...]
    ) -> Self:
        """The same body under a new header: consecutive LSNs from ``first_lsn``,
        one timestamp, the given wave and copyset (what a sequencer does, once
        per wave).  The body is copied once and not checked again."""
        lens = self.payload_lens()
        # The appender's own flags (a transaction's) stay; the rest are the
        # sequencer's to set, from nothing.
        kept = self.flags0 & FLAGS_APPENDED
        flags: list[int] | int = (
            [(TOMBSTONE if n < 0 else 0) | kept for n in lens] if -1 in lens else kept
        )
        body = memoryview(self.data)[self.body_start :]
        head = header(
            len(body),
            self.raw_len,
            self.body_crc,
            self.codec,
            self.count,
            first_lsn=first_lsn,
            timestamps_ms=timestamp_ms,
            flags=flags,
            wave=wave,
            copyset=copyset,
            producer=self.producer,
            extras=bool(self.layout & EXTRAS),
        )
        b: Any = type(self).__new__(type(self))  # filled in below (slots of PackedBatch)
        names = ("count", "codec", "raw_len", "body_crc", "payload_bytes", "producer", "_lens")
        b._blob = self._blob
        for name in names:
            setattr(b, name, getattr(self, name))
        b.data = b"".join((head, body))
        b.first_lsn = first_lsn
        b.last_lsn = first_lsn + self.count - 1
        b.timestamp_ms = timestamp_ms
        b.wave = wave
        b.copyset = copyset
        b.layout = (
            (FLAGS if isinstance(flags, list) else 0)
            | (PRODUCER if self.producer else 0)
            | (self.layout & EXTRAS)
        )
        b.flags0 = flags[0] if isinstance(flags, list) else flags
        b.body_start = len(head)
        return cast("Self", b)

    def reheader(
        self, *, copyset: tuple[int, ...], add_flags: int = 0, wave: int | None = None
    ) -> Self:
        """The same records (LSNs, timestamps, body) under a header with
        another copyset (and ``wave``, when given), every record's flags
        OR-ed with ``add_flags``: what rebuilding writes and amends, and a
        STORE of records packed elsewhere.  The body is not decoded."""
        lsns = self.lsns() if self.layout & LSNS else None
        stamps: list[int] | int = (
            self.timestamps() if self.layout & TIMESTAMPS else self.timestamp_ms
        )
        flags: list[int] | int = (
            [f | add_flags for f in self.flags()]
            if self.layout & FLAGS
            else self.flags0 | add_flags
        )
        return self.assemble(
            self.data[self.body_start :],
            self.raw_len,
            self.body_crc,
            self.codec,
            self.count,
            first_lsn=self.first_lsn,
            timestamps_ms=stamps,
            flags=flags,
            lsns=lsns,
            wave=self.wave if wave is None else wave,
            copyset=copyset,
            producer=self.producer,
            extras=bool(self.layout & EXTRAS),
        )

    def select(self, keep: Sequence[int]) -> Self:
        """A batch of the records at indices ``keep`` (increasing), same codec,
        wave and copyset.  Decompresses: for splits and compaction only."""
        sub = self.columns().take(keep)
        return self.of_columns(
            sub.lsns,
            sub.payloads,
            timestamps_ms=sub.timestamps_ms,
            keys=sub.keys,
            flags=sub.flags,
            wave=self.wave,
            copyset=self.copyset,
            codec=self.codec,
            extras=sub.extras,
        )

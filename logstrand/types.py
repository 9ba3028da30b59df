"""Core identifiers and the items a reader delivers.

An LSN is an unsigned 64-bit number: the epoch in the high 32 bits, the epoch
sequence number (ESN) in the low 32 bits.  LSNs of one log only ever increase;
a new sequencer always takes a higher epoch, so every LSN it hands out sorts
after every LSN of the earlier sequencers.
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
from typing import TYPE_CHECKING, Final, NamedTuple, NewType

import attrs

from .batch._extras import unpack_extra
from .records import EPOCH_MAX, ESN_MAX, check_log_id

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

LogID = NewType("LogID", int)

LSN_INVALID: Final = 0
LSN_OLDEST: Final = 1
LSN_MAX: Final = 2**64 - 1


class _Tail:
    """Sentinel for ``read(..., until=TAIL)``: the tail as it was when reading started."""

    _instance: _Tail | None = None

    def __new__(cls) -> _Tail:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TAIL"

    def __reduce__(self) -> str:
        return "TAIL"


TAIL: Final = _Tail()


def compose_lsn(epoch: int, esn: int) -> int:
    """The LSN of ``esn`` in ``epoch``."""
    if not 0 <= epoch <= EPOCH_MAX:
        raise ValueError(f"epoch {epoch} out of range 0..{EPOCH_MAX}")
    if not 0 <= esn <= ESN_MAX:
        raise ValueError(f"esn {esn} out of range 0..{ESN_MAX}")
    return (epoch << 32) | esn


def lsn_epoch(lsn: int) -> int:
    """The epoch of an LSN (its high 32 bits)."""
    return lsn >> 32


def lsn_esn(lsn: int) -> int:
    """The ESN of an LSN (its low 32 bits)."""
    return lsn & 0xFFFFFFFF


def next_epoch_lsn(lsn: int) -> int:
    """The first LSN of the epoch after ``lsn``'s (ESN 0: no record there)."""
    return ((lsn >> 32) + 1) << 32


def format_lsn(lsn: int) -> str:
    """The conventional human form ``e<epoch>n<esn>``, as LogDevice prints it."""
    return f"e{lsn >> 32}n{lsn & 0xFFFFFFFF}"


def lsn_value(value: object, what: str) -> int:
    """An LSN given in a JSON document or an option: an integer (not a bool),
    or text ``parse_lsn`` reads.

    Raises:
        InvalidArgumentError: anything else; the message names ``what``.
    """
    from .errors import InvalidArgumentError

    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= LSN_MAX:
            return value
    elif isinstance(value, str):
        try:
            return parse_lsn(value)
        except ValueError:
            pass
    raise InvalidArgumentError(f"{what}: {value!r} is not an LSN (an integer or 'e5n123')")


_DIGITS = re.compile(r"[0-9]{1,20}")


def parse_lsn(text: str) -> int:
    """Parse an LSN given either as a plain integer or as ``e<epoch>n<esn>``.

    Raises:
        ValueError: the text is neither form, or is out of range.
    """
    text = text.strip()
    # ASCII digits only: int() would take "١٢" or "1_000", and its own
    # message ("invalid literal for int()") tells a user nothing.
    if text.startswith("e") and "n" in text:
        epoch_text, _, esn_text = text[1:].partition("n")
        if not (_DIGITS.fullmatch(epoch_text) and _DIGITS.fullmatch(esn_text)):
            raise ValueError(f"{text!r} is not an LSN: give e<epoch>n<esn> (e1n5) or a number")
        return compose_lsn(int(epoch_text), int(esn_text))
    if not _DIGITS.fullmatch(text):
        raise ValueError(f"{text!r} is not an LSN: give a number or e<epoch>n<esn> (e1n5)")
    value = int(text)
    if not 0 <= value <= LSN_MAX:
        raise ValueError(f"LSN {value} out of range 0..{LSN_MAX}")
    return value


def validate_log_id(log_id: int) -> LogID:
    """Check that ``log_id`` is a valid user log id and return it typed.

    Raises:
        InvalidArgumentError (a ValueError): zero, negative, too large, or an
            internal log id (``records.check_log_id``).
    """
    return LogID(check_log_id(log_id))


class GapType(enum.IntEnum):
    """Why a reader skips a range of LSNs.  The numbers travel on the wire."""

    UNKNOWN = 0
    #: End of an epoch: the next record is in a later epoch.  Benign.
    BRIDGE = 1
    #: An LSN that recovery plugged because its append was never acknowledged.
    HOLE = 2
    #: Every copy of a record that may have been acknowledged is gone.
    DATALOSS = 3
    #: Below the log's trim point.
    TRIM = 4
    #: The reader is not allowed to read this log.
    ACCESS = 5
    #: The log is not (or no longer) in the configuration.
    NOTINCONFIG = 6
    #: Removed by compaction of a keyed log.
    COMPACTED = 7
    #: Every copy the reader could reach fails its checksum (corrupt on disk or
    #: on the way): the records exist but cannot be delivered.
    CHECKSUM_FAIL = 8


class SegmentField(enum.IntEnum):
    """A tiered segment's fields, as the epoch store's lists hold them
    (``epochstore._tier_docs``)."""

    FIRST = 0
    LAST = 1
    KEY = 2
    BYTES = 3
    CRC = 4
    RECORDS = 5
    #: The newest timestamp of its records (ms; absent in segments recorded
    #: before it was kept): ``find_time`` below the nodes' floors.
    LAST_TS = 6


class Record(NamedTuple):
    """One record as a reader delivers it.

    A named tuple: immutable and hashable, built in bulk by the readers
    without a Python call per record (``records_of``; a frozen attrs class,
    which it was, cost 2-3x more to build than the rest of delivering it),
    and unpacked like one (``lsn, ts, payload, key, extra = r``).
    """

    lsn: int
    timestamp: int  # milliseconds since the epoch
    payload: bytes | None  # None: no payload (a null value); a tombstone in a compacted log
    key: bytes | None = None
    #: The record's headers and create time, packed (``batch.pack_extra``);
    #: ``headers`` and ``create_time`` read them.
    extra: bytes | None = None

    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]:
        """The record's headers, (name, value) pairs in the order written."""
        return unpack_extra(self.extra)[1]

    @property
    def create_time(self) -> int | None:
        """When its producer says it made the record (ms since the epoch; a
        Kafka producer's CreateTime), or None.  ``timestamp`` is the log's."""
        return unpack_extra(self.extra)[0]

    @property
    def epoch(self) -> int:
        return self.lsn >> 32

    @property
    def esn(self) -> int:
        return self.lsn & 0xFFFFFFFF


_new_record = functools.partial(tuple.__new__, Record)


def records_of(
    lsns: Sequence[int],
    timestamps: Sequence[int],
    payloads: Sequence[bytes | None],
    keys: Sequence[bytes | None],
    extras: Sequence[bytes | None] | None = None,
) -> Iterator[Record]:
    """Records from columns of one length, without a Python call per record."""
    more = extras if extras is not None else itertools.repeat(None, len(lsns))
    return map(_new_record, zip(lsns, timestamps, payloads, keys, more, strict=True))


@attrs.frozen(slots=True)
class Gap:
    """A range of LSNs, both ends included, with no records for the reason ``type``."""

    type: GapType
    lo: int
    hi: int

    def __attrs_post_init__(self) -> None:
        if not 0 < self.lo <= self.hi:
            raise ValueError(f"bad gap range {self.lo}..{self.hi}")

"""On-disk formats of LogsDB: keys, record values, metadata values.

Data keys (in a partition column family) are ``log_id u64 BE | lsn u64 BE``, so
RocksDB's bytewise order is (log, LSN) order.

Metadata keys (in the ``meta`` column family) start with a one-byte prefix
from ``META_PREFIXES``; a test keeps the prefixes unique.

Record value (big-endian)::

    u64 timestamp_ms | u16 flags | u32 wave | u32 crc32c(payload) | u8 copyset_len
    u32 node_id[copyset_len]
    [u16 key_len | key]          when flags has _HAS_KEY
    payload                      (empty for a tombstone, which has RecordFlags.TOMBSTONE)
"""

from __future__ import annotations

import bisect
import itertools
import struct
from typing import TYPE_CHECKING, Final, NamedTuple

import attrs
import google_crc32c
import numpy as np

from ..errors import CorruptionError, InvalidArgumentError
from ..records import COPYSET_SIZE_MAX, FLAGS_PUBLIC_MASK, KEY_BYTES_MAX, RecordBatch
from ..records import TOMBSTONE as _TOMBSTONE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

# Record flags are ``RecordFlags`` (the low byte); the high byte is LogsDB's own.
_HAS_KEY: Final = 0x0100

DATA_KEY = struct.Struct(">QQ")
_HEADER = struct.Struct(">QHIIB")
HEADER_BYTES: Final = _HEADER.size
# The header without its copyset length byte: pack_copyset() supplies that byte.
_HEAD = struct.Struct(">QHII")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")

crc32c = google_crc32c.value

# name -> prefix byte of every metadata key
META_PREFIXES: Final = {
    "partition": b"P",  # P | pid            -> start_ts_ms, created_ms
    "directory": b"D",  # D | log | pid      -> DirEntry
    "trim": b"T",  # T | log               -> trim point LSN
    "seal": b"S",  # S | log               -> sealed epoch
    "lce": b"C",  # C | log                -> last clean epoch
    "release": b"R",  # R | log            -> release pointer LSN
    "clean": b"K",  # K | log              -> compaction clean point LSN
    "version": b"V",  # V                  -> format version
}
FORMAT_VERSION: Final = 1

_PARTITION_VALUE = struct.Struct(">QQ")
_DIR_KEY = struct.Struct(">cQQ")
_LOG_KEY = struct.Struct(">cQ")
_DIR_VALUE = struct.Struct(">QQQQQQ")


class StoredRecord(NamedTuple):
    """One record copy as LogsDB holds it."""

    lsn: int
    timestamp_ms: int
    flags: int
    wave: int
    copyset: tuple[int, ...]
    key: bytes | None
    payload: bytes | None  # None for a tombstone


class DirEntry(NamedTuple):
    """What one partition holds of one log."""

    first_lsn: int
    last_lsn: int
    min_ts_ms: int
    max_ts_ms: int
    bytes: int
    records: int


def data_key(log_id: int, lsn: int) -> bytes:
    return DATA_KEY.pack(log_id, lsn)


def log_key(kind: str, log_id: int) -> bytes:
    return _LOG_KEY.pack(META_PREFIXES[kind], log_id)


def dir_key(log_id: int, partition_id: int) -> bytes:
    return _DIR_KEY.pack(b"D", log_id, partition_id)


def parse_dir_key(key: bytes) -> tuple[int, int]:
    _, log_id, pid = _DIR_KEY.unpack(key)
    return log_id, pid


def partition_key(partition_id: int) -> bytes:
    return b"P" + _U64.pack(partition_id)


def pack_partition(start_ts_ms: int, created_ms: int) -> bytes:
    return _PARTITION_VALUE.pack(start_ts_ms, created_ms)


def unpack_partition(value: bytes) -> tuple[int, int]:
    start, created = _PARTITION_VALUE.unpack(value)
    return start, created


def pack_dir(entry: DirEntry) -> bytes:
    return _DIR_VALUE.pack(*entry)


def unpack_dir(value: bytes) -> DirEntry:
    return DirEntry(*_DIR_VALUE.unpack(value))


def pack_u64(value: int) -> bytes:
    return _U64.pack(value)


def unpack_u64(value: bytes) -> int:
    return int(_U64.unpack(value)[0])


_COPYSET_CACHE: dict[tuple[int, ...], bytes] = {}


def pack_copyset(copyset: tuple[int, ...]) -> bytes:
    """The ``u8 len | u32 ids`` tail of the header; cached, copysets repeat."""
    packed = _COPYSET_CACHE.get(copyset)
    if packed is None:
        if len(copyset) > COPYSET_SIZE_MAX:
            raise InvalidArgumentError(f"copyset of {len(copyset)} nodes is too large")
        packed = struct.pack(f">B{len(copyset)}I", len(copyset), *copyset)
        if len(_COPYSET_CACHE) < 4096:
            _COPYSET_CACHE[copyset] = packed
    return packed


def encode_value(
    timestamp_ms: int,
    flags: int,
    wave: int,
    copyset_packed: bytes,
    key: bytes | None,
    payload: bytes | None,
) -> bytes:
    """The value of one record.  ``copyset_packed`` comes from ``pack_copyset``."""
    if payload is None:
        flags |= _TOMBSTONE
        payload = b""
    if key is None:
        head = _HEAD.pack(timestamp_ms, flags & ~_HAS_KEY, wave, crc32c(payload))
        return b"".join((head, copyset_packed, payload))
    if len(key) > KEY_BYTES_MAX:
        raise InvalidArgumentError(f"key of {len(key)} bytes exceeds {KEY_BYTES_MAX}")
    head = _HEAD.pack(timestamp_ms, flags | _HAS_KEY, wave, crc32c(payload))
    return b"".join((head, copyset_packed, _U16.pack(len(key)), key, payload))


_COPYSET_STRUCTS = [struct.Struct(f">{n}I") for n in range(COPYSET_SIZE_MAX + 1)]
_COPYSET_DECODED: dict[bytes, tuple[int, ...]] = {}


def encode_values(
    timestamps_ms: Sequence[int],
    flags: Sequence[int],
    wave: int,
    copyset_packed: bytes,
    keys: Sequence[bytes | None],
    payloads: Sequence[bytes | None],
) -> list[bytes]:
    """Values of many records sharing one copyset and wave."""
    if keys.count(None) == len(keys) and None not in payloads:
        # The common case (no keys, no tombstones), kept to one expression.
        head = _HEAD.pack
        return [
            head(ts, fl & ~_HAS_KEY, wave, crc32c(p)) + copyset_packed + p  # type: ignore[operator]
            for ts, fl, p in zip(timestamps_ms, flags, payloads, strict=True)
        ]
    return [
        encode_value(ts, fl, wave, copyset_packed, k, p)
        for ts, fl, k, p in zip(timestamps_ms, flags, keys, payloads, strict=True)
    ]


@attrs.define(slots=True)
class StoredBatch:
    """Records of one log as columns: what one read of LogsDB returns."""

    log_id: int
    lsns: list[int] = attrs.Factory(list)
    timestamps_ms: list[int] = attrs.Factory(list)
    flags: list[int] = attrs.Factory(list)
    waves: list[int] = attrs.Factory(list)
    copysets: list[tuple[int, ...]] = attrs.Factory(list)
    keys: list[bytes | None] = attrs.Factory(list)
    payloads: list[bytes | None] = attrs.Factory(list)
    #: Sum of payload lengths.
    payload_bytes: int = 0
    #: Every record up to this LSN was looked at (returned, or skipped by the
    #: reader's ``skip``): the next read goes on from here + 1.
    scanned_to: int = 0
    #: Set by ``decode_into`` when it stopped inside a long skipped run: the
    #: run's STORE identity and the last LSN seen in it.
    skip_hint: tuple[bytes, int] | None = None
    #: The public flags of every record here, OR-ed (a test for "any hole?",
    #: "any recovery copy?" without a pass over the records).
    flag_bits: int = 0

    def __len__(self) -> int:
        return len(self.lsns)

    def to_record_batch(self) -> RecordBatch:
        """The wire form (without copysets and waves), built without re-checking."""
        return RecordBatch.trusted(
            tuple(self.lsns),
            tuple(self.timestamps_ms),
            tuple(self.flags),
            tuple(self.keys),
            tuple(self.payloads),
        )

    def records(self) -> Iterator[StoredRecord]:
        return map(
            StoredRecord,
            self.lsns,
            self.timestamps_ms,
            self.flags,
            self.waves,
            self.copysets,
            self.keys,
            self.payloads,
        )


_HEAD_DTYPES: dict[int, np.dtype[np.void]] = {}


def _head_dtype(ncs: int) -> np.dtype[np.void]:
    """numpy view of a value's header followed by a copyset of ``ncs`` nodes."""
    dt = _HEAD_DTYPES.get(ncs)
    if dt is None:
        fields = [("ts", ">u8"), ("flags", ">u2"), ("wave", ">u4"), ("crc", ">u4"), ("ncs", "u1")]
        if ncs:
            fields.append(("cs", f"V{4 * ncs}"))
        dt = _HEAD_DTYPES[ncs] = np.dtype(fields)
        assert dt.itemsize == HEADER_BYTES + 4 * ncs
    return dt


def _decode_one(v: bytes) -> tuple[bytes | None, bytes, bytes]:
    """(key, payload, copyset bytes) of one value, for values with keys or mixed copysets."""
    ncs = v[HEADER_BYTES - 1]
    off = HEADER_BYTES + 4 * ncs
    csb = v[HEADER_BYTES:off]
    key = None
    if _U16.unpack_from(v, 8)[0] & _HAS_KEY:
        klen = _U16.unpack_from(v, off)[0]
        key = v[off + 2 : off + 2 + klen]
        if len(key) != klen:
            raise struct.error("truncated key")
        off += 2 + klen
    return key, v[off:], csb


def decode_into(
    out: StoredBatch,
    items: Iterator[tuple[bytes, bytes]],
    max_records: int,
    max_bytes: int,
    skip: Callable[[tuple[int, ...]], bool] | None = None,
) -> bool:
    """Decode (key, value) pairs into ``out`` until a limit is reached.

    Returns True when a limit may have stopped it (call again from the next
    LSN), False when ``items`` ran out.  ``max_bytes`` counts value bytes and
    is checked after each record, so at least one record always fits.

    ``skip(copyset)``: runs of records stored under one copyset for which it
    says True are passed over without decoding (a node under single-copy
    delivery does not send the records another node of their copyset sends);
    ``out.scanned_to`` still moves past them.  At most ``SKIP_FACTOR`` times
    ``max_records`` records are passed over in one call.

    Raises:
        CorruptionError: a value is malformed or fails its checksum.
    """
    # Strategy: work a column at a time with map(), zip() and struct calls that
    # run in C, instead of a Python loop body per record.  The read path's cost
    # per record is then a few C calls and one slice.
    want = max_records - len(out.lsns)
    # Pull in chunks, so that large records stop the read at max_bytes instead
    # of fetching max_records of them from RocksDB only to drop most.
    pairs: list[tuple[bytes, bytes]] = []
    size = out.payload_bytes
    skipped = 0
    buf: list[tuple[bytes, bytes]] = []
    stopped = False
    hint: tuple[bytes, int] | None = None
    while True:
        if len(pairs) >= want or size >= max_bytes:
            stopped = True
            break
        if not buf:
            buf = list(itertools.islice(items, min(want - len(pairs), 256)))
            if not buf:
                break  # the source ran out
        if skip is None:
            run, buf = buf, []
        else:
            # The first run of records under one copyset: skipped whole, or kept.
            end = _run_end(buf)
            run, buf = buf[:end], buf[end:]
            cs_end = _cs_end(run[0][1])
            csb = run[0][1][HEADER_BYTES:cs_end]
            # (A malformed value is kept: the decoder below reports it.)
            if cs_end and len(csb) == cs_end - HEADER_BYTES and skip(_cs_decode(csb)):
                out.scanned_to = max(out.scanned_to, _key_lsn(run[-1][0]))
                skipped += len(run)
                if not buf and len(run) >= SEEK_RUN_MIN:
                    # A whole chunk of one STORE's records, none ours: the run
                    # likely goes on.  Let read_batch find its end by seeking
                    # instead of reading every record of it.
                    hint = (_store_identity(run[-1][1]), _key_lsn(run[-1][0]))
                    stopped = True
                    break
                if skipped >= SKIP_FACTOR * max_records:
                    stopped = True
                    break
                continue
        pairs += run
        size += sum(len(v) for _, v in run)
    # Records pulled but not taken (``buf``) lie above scanned_to: the next
    # call reads them again.
    stopped = stopped or bool(buf)
    out.skip_hint = hint
    if not pairs:
        return stopped
    ks, vs = zip(*pairs, strict=True)
    sizes = list(itertools.accumulate(map(len, vs), initial=out.payload_bytes))
    if sizes[-1] >= max_bytes:
        cut = max(1, bisect.bisect_left(sizes, max_bytes, 1))
        ks, vs, stopped = ks[:cut], vs[:cut], True
    n = len(ks)
    keys: Sequence[bytes | None]
    pays: Sequence[bytes | None]
    copysets: Sequence[tuple[int, ...]]
    try:
        lsns = struct.unpack(f">{2 * n}Q", b"".join(ks))[1::2]
        # Guess that every value has the first one's copyset size (true unless
        # the replication factor changed) and view header + copyset in one go.
        ncs0 = vs[0][HEADER_BYTES - 1]
        off = HEADER_BYTES + 4 * ncs0
        heads = np.frombuffer(b"".join([v[:off] for v in vs]), _head_dtype(ncs0))
        fl_col = heads["flags"]
        flag_bits = int(np.bitwise_or.reduce(fl_col))
        uniform = bool((heads["ncs"] == ncs0).all())
        has_key = fl_col & _HAS_KEY
        if uniform and (not flag_bits & _HAS_KEY or has_key.all()):
            if flag_bits & _HAS_KEY:
                # Every record keyed: the key lengths in one view, then slices.
                kls = np.frombuffer(b"".join([v[off : off + 2] for v in vs]), ">u2").tolist()
                kb = [v[off + 2 : off + 2 + k] for v, k in zip(vs, kls, strict=True)]
                if sum(map(len, kb)) != sum(kls):
                    raise ValueError("truncated key")
                keys = kb
                pays = [v[off + 2 + k :] for v, k in zip(vs, kls, strict=True)]
            else:
                keys = (None,) * n
                pays = [v[off:] for v in vs]
            if ncs0 == 0 or (heads["cs"] == heads["cs"][0]).all():
                copysets = (_cs_decode(vs[0][HEADER_BYTES:off]),) * n
            else:
                copysets = [_cs_decode(v[HEADER_BYTES:off]) for v in vs]
        else:
            heads = np.frombuffer(b"".join([v[:HEADER_BYTES] for v in vs]), _head_dtype(0))
            fl_col = heads["flags"]
            # The first view assumed one copyset size for all: read the flags again.
            flag_bits = int(np.bitwise_or.reduce(fl_col))
            keys, pays, csbs = zip(*map(_decode_one, vs), strict=True)
            copysets = [_cs_decode(b) for b in csbs]
    except (struct.error, ValueError, TypeError, IndexError):
        raise CorruptionError(f"malformed record value in log {out.log_id}") from None
    crcs = heads["crc"].tolist()
    if list(map(crc32c, pays)) != crcs:
        bad = next(i for i, p in enumerate(pays) if crc32c(p) != crcs[i])
        raise CorruptionError(f"log {out.log_id} lsn {lsns[bad]}: payload checksum mismatch")
    out.flag_bits |= flag_bits & FLAGS_PUBLIC_MASK
    if flag_bits & _TOMBSTONE:
        tomb = (fl_col & _TOMBSTONE).tolist()
        pays = [None if t else p for t, p in zip(tomb, pays, strict=True)]
    out.lsns.extend(lsns)
    out.timestamps_ms.extend(heads["ts"].tolist())
    out.flags.extend((fl_col & FLAGS_PUBLIC_MASK).tolist())
    out.waves.extend(heads["wave"].tolist())
    out.copysets.extend(copysets)
    out.keys.extend(keys)
    out.payloads.extend(pays)
    out.payload_bytes = sizes[n]
    out.scanned_to = max(out.scanned_to, lsns[-1])
    return stopped


SKIP_FACTOR = 8
#: A skipped run this long ends a decode_into call with a hint to seek past it.
SEEK_RUN_MIN = 128


def store_identity(value: bytes) -> bytes:
    """What the records of one STORE share: timestamp, wave and copyset bytes."""
    return _store_identity(value)


def _store_identity(value: bytes) -> bytes:
    return value[0:8] + value[10:14] + value[HEADER_BYTES - 1 : _cs_end(value)]


def _key_lsn(key: bytes) -> int:
    return int(_U64.unpack_from(key, 8)[0])


def _cs_end(value: bytes) -> int:
    """Where the copyset of a stored value ends (0 when the value is too short)."""
    if len(value) < HEADER_BYTES:
        return 0
    return HEADER_BYTES + 4 * value[HEADER_BYTES - 1]


def _run_end(pairs: list[tuple[bytes, bytes]]) -> int:
    """The length of the leading run of values stored under one copyset."""
    first = pairs[0][1]
    end = _cs_end(first)
    if not end:
        return 1  # malformed: the decoder will say so
    csb = first[HEADER_BYTES - 1 : end]
    for i in range(1, len(pairs)):
        if pairs[i][1][HEADER_BYTES - 1 : end] != csb:
            return i
    return len(pairs)


def _cs_decode(csb: bytes) -> tuple[int, ...]:
    cs = _COPYSET_DECODED.get(csb)
    if cs is not None:
        return cs
    cs = _COPYSET_STRUCTS[len(csb) // 4].unpack(csb)
    if len(_COPYSET_DECODED) < 4096:
        _COPYSET_DECODED[csb] = cs
    return cs


def value_timestamp(value: bytes) -> int:
    """The timestamp of a record value, without decoding the rest."""
    return int(_U64.unpack_from(value, 0)[0])

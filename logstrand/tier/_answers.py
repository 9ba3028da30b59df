"""A node's answers to ``TierRead``, as a procedure (``_steps``): the rules
of ``_serve``'s module docstring, with its caches, and no I/O of its own.
``_serve.TierServer`` drives it with trio; the simulation drives it over an
object store of its own."""

from __future__ import annotations

import collections
import logging
from typing import Any

import attrs

from ..batch import PackedBatch
from ..errors import ProtocolError, Status
from ..types import GapType, compose_lsn
from ..types import SegmentField as F
from ..wire import PACKED_MAX, TIER_GAPS_MAX, TierRead, TierReadReply
from ._format import (
    Batch,
    CorruptObject,
    Entry,
    GapEntry,
    blocks_from,
    entries_from,
    parse_block,
)
from ._objects import ObjectMissing
from ._steps import AwaitAhead, ObjectCall, Opened, Procedure, StoreCall, open_object

_log = logging.getLogger("logstrand.tier")
#: The first LSN a log can hold.
LSN_FIRST = compose_lsn(1, 1)
#: How long a node keeps a log's segments before it reads them again.
STATE_TTL_S = 2.0
#: Objects whose footer and index a node keeps.
OPENED_MAX = 1024
#: Logs whose segments a node keeps.
STATES_MAX = 10_000


class BlockCache:
    """Blocks of tiered objects, at most ``limit`` bytes, least recently used
    out first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._blocks: collections.OrderedDict[tuple[str, int], bytes] = collections.OrderedDict()

    def get(self, key: tuple[str, int]) -> bytes | None:
        data = self._blocks.get(key)
        if data is None:
            self.misses += 1
            return None
        self.hits += 1
        self._blocks.move_to_end(key)
        return data

    def peek(self, key: tuple[str, int]) -> bool:
        """Whether ``key`` is held (no hit counted, no order changed)."""
        return key in self._blocks

    def put(self, key: tuple[str, int], data: bytes) -> None:
        if len(data) > self.limit or key in self._blocks:
            return
        self._blocks[key] = data
        self.bytes += len(data)
        while self.bytes > self.limit:
            _, old = self._blocks.popitem(last=False)
            self.bytes -= len(old)


@attrs.frozen
class Ahead:
    """What to fetch next for a reader that took an answer (the read-ahead)."""

    opened: Opened
    at: int
    limit: int


class TierAnswers:
    """A node's answers and what it keeps between them: the logs' segments
    (``STATE_TTL_S``), the objects' footers and indexes, the blocks."""

    def __init__(self, cache_bytes: int) -> None:
        self.cache = BlockCache(cache_bytes)
        self._states: dict[int, tuple[float, int, int, list[list[Any]]]] = {}
        self._opened: collections.OrderedDict[str, Opened] = collections.OrderedDict()

    def answer(self, msg: TierRead, now: float) -> Procedure:
        """The reply to ``msg`` and the read-ahead to start (None: none), as
        ``(TierReadReply, Ahead | None)``."""
        trim, point, segments = yield from self._state(msg.log_id, msg.start_lsn, now)
        # Nothing exists below e1n1 (a reader's core starts there too): not
        # a TRIM gap below the first object.
        start, until = max(msg.start_lsn, LSN_FIRST), min(msg.until_lsn, point)
        entries: list[Entry] = []
        ahead = None
        if start <= min(trim, until):
            # Trimmed: a TRIM gap, as the nodes' streams say (the objects
            # below the trim point go in the owner's next round).
            entries = [GapEntry(GapType.TRIM, start, min(trim, until))]
        elif start <= until:
            entries, ahead = yield from self._entries(
                msg.log_id, segments, start, until, msg.max_bytes
            )
        entries = _fit([e for e in entries if e.lo <= until])
        next_lsn = min(entries[-1].hi, until) + 1 if entries else max(start, point + 1)
        return _reply(msg.request_id, entries, until, next_lsn, point), ahead

    def _state(self, log_id: int, lsn: int, now: float) -> Procedure:
        """The log's trim point, tiered point and segments, as kept for up to
        ``STATE_TTL_S``, unless they are older than ``lsn``: read again then,
        since a reader sent here by a node's local floor knows of a tiered
        point that this node has not seen yet."""
        kept = self._states.get(log_id)
        if kept is not None and now - kept[0] < STATE_TTL_S and lsn <= kept[2]:
            return kept[1], kept[2], kept[3]
        trim, (point, segments) = yield StoreCall(
            lambda s: (s.trim_point(log_id), s.tier_state(log_id))
        )
        if len(self._states) >= STATES_MAX:
            self._states.clear()
        self._states[log_id] = (now, trim, point, segments)
        return trim, point, segments

    def _entries(
        self, log_id: int, segments: list[list[Any]], start: int, until: int, max_bytes: int
    ) -> Procedure:
        segment = next((s for s in segments if s[F.LAST] >= start), None)
        if segment is None:
            # Below the tiered point, yet no object holds it: said, not skipped.
            _log.error("tier: log %d: no segment holds LSN %d", log_id, start)
            return [GapEntry(GapType.DATALOSS, start, until)], None
        if segment[F.FIRST] > start:
            # Below the first segment: trimmed away (a trim drops segments).
            return [GapEntry(GapType.TRIM, start, min(segment[F.FIRST] - 1, until))], None
        key = str(segment[F.KEY])
        try:
            opened = yield from self._open(key, int(segment[F.BYTES]))
            return (yield from self._read(opened, start, max_bytes))
        except ObjectMissing:
            _log.error("tier: log %d: object %s is not in the store", log_id, key)
            return [GapEntry(GapType.DATALOSS, start, segment[F.LAST])], None
        except CorruptObject as exc:
            _log.error("tier: log %d: object %s: %s", log_id, key, exc)
            return [GapEntry(GapType.CHECKSUM_FAIL, start, segment[F.LAST])], None

    def _open(self, key: str, size: int) -> Procedure:
        opened = self._opened.get(key)
        if opened is None:
            opened = yield from open_object(key, size)
            self._opened[key] = opened
            if len(self._opened) > OPENED_MAX:
                self._opened.popitem(last=False)
        else:
            self._opened.move_to_end(key)
        return opened

    def _read(self, opened: Opened, start: int, max_bytes: int) -> Procedure:
        """The entries from ``start``: cached blocks, then one ranged read of
        the blocks after them (up to ``max_bytes``); and the blocks a reader
        asks for next, for the read-ahead."""
        index = opened.index
        at = blocks_from(index, start)
        yield AwaitAhead((opened.name, at))
        out: list[Entry] = []
        taken = 0
        while at < len(index) and taken < max_bytes:
            data = self.cache.get((opened.name, at))
            if data is None:
                break
            out += parse_block(data, index[at])
            taken += len(data)
            at += 1
        if at < len(index) and taken < max_bytes:
            for i, block in (yield from self.fetch(opened, at, max_bytes - taken)):
                out += parse_block(block, index[i])
                at = i + 1
        ahead = Ahead(opened, at, max_bytes) if at < len(index) else None
        return entries_from(out, start), ahead

    def fetch(self, opened: Opened, at: int, limit: int) -> Procedure:
        """Blocks from ``at`` on, about ``limit`` bytes of them (one at
        least), in one ranged read; each goes in the cache."""
        index = opened.index
        last = at
        while last + 1 < len(index) and (
            index[last + 1].offset + index[last + 1].length - index[at].offset <= limit
        ):
            last += 1
        begin = index[at].offset
        length = index[last].offset + index[last].length - begin
        raw = yield ObjectCall("read", (opened.name, begin, length))
        out = []
        for i in range(at, last + 1):
            row = index[i]
            block = raw[row.offset - begin : row.offset - begin + row.length]
            self.cache.put((opened.name, i), block)
            out.append((i, block))
        return out


def _fit(entries: list[Entry]) -> list[Entry]:
    """As many entries, from the first, as one answer carries."""
    batches = gaps = 0
    for i, e in enumerate(entries):
        if isinstance(e, Batch):
            batches += 1
        else:
            gaps += 1
        if batches > PACKED_MAX or gaps > TIER_GAPS_MAX:
            return entries[:i]
    return entries


def _reply(
    request_id: int, entries: list[Entry], until: int, next_lsn: int, point: int
) -> TierReadReply:
    batches: list[PackedBatch] = []
    windows: list[int] = []
    gaps: list[int] = []
    for e in entries:
        hi = min(e.hi, until)
        if isinstance(e, Batch):
            try:
                batches.append(PackedBatch.parse(e.data))
                windows += (e.lo, hi)
                continue
            except ProtocolError:
                # Under the block's CRC yet no batch: written so (a bug, a
                # forged object), not damaged on the way; said, as damage is.
                _log.error("tier: a stored batch of LSNs %d..%d does not parse", e.lo, hi)
                gaps += (int(GapType.CHECKSUM_FAIL), e.lo, hi)
                continue
        gaps += (int(e.type), e.lo, hi)
    return TierReadReply(
        request_id,
        int(Status.OK),
        next_lsn,
        point,
        tuple(batches),
        tuple(windows),
        tuple(gaps),
    )

"""How Fetch reads a partition's records: from a kept read stream
(``_sessions``), as Kafka batches made from the reader's columns
(``encode_columns``), and one answer ahead.

A consumer catching up sends its next fetch of a partition only when the
last one is answered, at the offset after its records.  So while it takes
in one answer, the front makes the next: the session it keeps for that
offset carries a task that reads and encodes the next ``limit`` bytes
(``Ahead``), and the fetch that comes for that offset takes them ready (or
waits for the rest).  Only for answers of at most ``AHEAD_BYTES_MAX`` (a
partition's default limit in librdkafka and kafka-python is 1 MiB): with
``SESSIONS_MAX`` sessions kept, the front holds at most 32 x 2 MiB ahead.
A stream that follows the log (a long poll's) is not read ahead: what it
would read has not been written yet.
"""

from __future__ import annotations

import bisect
import logging
from typing import TYPE_CHECKING

import attrs
import trio

from ..client import GapItem
from ..errors import LogstrandError
from ..records import CONTROL, TRANSACTIONAL
from ..transactions import decode_marker, producer_of
from ..types import GapType, compose_lsn, lsn_epoch
from ._offsets import LEADER_EPOCH_MAX
from ._packed_records import RunEncoder
from ._records_encode import control_record, encode_columns
from ._sessions import Session, Sessions, close

if TYPE_CHECKING:
    from ..client import AsyncClient, RecordRun
    from ._offsets import OffsetMap

_log = logging.getLogger("logstrand.kafka")

#: Records in one Kafka batch of a Fetch answer, at most.
FETCH_BATCH_RECORDS = 1000
#: Payload bytes in one Kafka batch of a Fetch answer, about: an answer
#: overshoots its limit by at most this, and the loop lets other tasks run
#: after each (a stored batch may hold a whole produce request of MiBs).
CHUNK_BYTES = 64 * 1024
#: Answers read ahead are at most this big (a partition's limit above it: none).
AHEAD_BYTES_MAX = 2 * 1024 * 1024

#: What one read of a partition gives: the answer's bytes, the offset after
#: them, whether the stream ended, and the offset map as it now stands.
Got = tuple[bytes, int, bool, "OffsetMap"]


@attrs.define(eq=False)
class Ahead:
    """The next answer of a session, being read by a task of its own (for
    the offset the session is kept under, the only one a fetch takes it at)."""

    limit: int
    done: trio.Event = attrs.Factory(trio.Event)
    outcome: Got | Exception | None = None

    async def result(self) -> Got:
        await self.done.wait()
        if isinstance(self.outcome, Exception):
            raise self.outcome
        if self.outcome is None:
            raise LogstrandError("the read ahead was cancelled")
        return self.outcome


class FetchReads:
    """Fetch's reading half of ``DataPlane`` (which has the fields)."""

    client: AsyncClient
    sessions: Sessions
    dataloss: int

    async def offsets(self, log_id: int, epoch: int, wait_s: float = 0.0) -> OffsetMap | None:
        raise NotImplementedError

    async def _read(
        self,
        log_id: int,
        m: OffsetMap,
        offset: int,
        limit: int,
        tail: int,
        codec: int = 0,
        key: int | None = None,
    ) -> bytes:
        """Batches of records from ``offset``, about ``limit`` bytes (at least
        one record, as Kafka returns a first batch larger than the limit),
        compressed with Kafka codec ``codec``.
        The read stream goes on from the last fetch's when this one continues
        where it ended, with the answer it read ahead; a new one is opened up
        to the tail.  ``key``: what the session is kept under, if not the log
        (a read_committed fetch's reads to the LSO, not to the tail)."""
        key = log_id if key is None else key
        session = self.sessions.take(key, offset)
        if session is not None and session.codec != codec and session.ahead is not None:
            # The topic's compression.type changed since this answer was read
            # ahead in the old codec: read it again.
            await close(session)
            session = None
        if session is None:
            stream = self.client.read(log_id, m.lsn_at(offset), tail)
            session = Session(stream, stream.batches())
        session.codec = codec  # a long poll's stream holds records, not batches
        ahead: Ahead | None = session.ahead
        session.ahead = None
        try:
            if ahead is not None:
                data, next_offset, ended, m = await ahead.result()
            else:
                data, next_offset, ended, m = await self._collect(log_id, m, session, offset, limit)
        except BaseException:
            await close(session)
            raise
        if ended:
            await close(session)
            return data
        if not session.follows and limit <= AHEAD_BYTES_MAX:
            session.ahead = Ahead(limit)
            session.scope = trio.CancelScope()
            self.client.nursery.start_soon(
                self._read_ahead, log_id, m, session, session.ahead, next_offset
            )
        await self.sessions.keep(key, next_offset, session)
        return data

    async def _read_ahead(
        self, log_id: int, m: OffsetMap, session: Session, ahead: Ahead, offset: int
    ) -> None:
        """Read the session's next answer, from ``offset`` (``Ahead``);
        cancelled when the session is closed."""
        assert session.scope is not None
        with session.scope:
            try:
                ahead.outcome = await self._collect(log_id, m, session, offset, ahead.limit)
            except Exception as exc:  # the fetch that takes it raises it
                ahead.outcome = exc
            finally:
                ahead.done.set()

    async def _collect(
        self, log_id: int, m: OffsetMap, session: Session, offset: int, limit: int
    ) -> Got:
        out: list[bytes] = []
        size = 0
        next_offset = offset
        while size < limit:
            if session.follows and out and not session.leftover:
                break  # what it held is taken; more would be a wait
            items = await session.next_items()
            if items is None:
                return b"".join(out), next_offset, True, m
            for k, item in enumerate(items):
                if isinstance(item, GapItem):
                    if item.type == GapType.DATALOSS:
                        self.dataloss += 1
                        _log.warning("kafka: log %d: records lost (%s), skipped", log_id, item)
                    continue
                m, parts, last, whole = await self._run(
                    log_id, m, item, next_offset, limit - size, first=not out, codec=session.codec
                )
                if parts:
                    out += parts
                    size += sum(map(len, parts))
                    next_offset = last + 1
                if not whole:
                    # The rest of this run is the next answer's, and this one
                    # is done (taking the leftover again here would find the
                    # same batch that does not fit, for ever).
                    session.leftover = items[k:]
                    return b"".join(out), next_offset, False, m
                if size >= limit:
                    session.leftover = items[k + 1 :]
                    break
        return b"".join(out), next_offset, False, m

    async def _run(
        self,
        log_id: int,
        m: OffsetMap,
        run: RecordRun,
        offset: int,
        room: int,
        *,
        first: bool,
        codec: int = 0,
    ) -> tuple[OffsetMap, list[bytes], int, bool]:
        """One run of records (one stored batch, one epoch) as Kafka batches
        of at most ``FETCH_BATCH_RECORDS`` records and ``CHUNK_BYTES``, those
        below ``offset`` left out, as long as they fit in ``room`` bytes; with
        the offset of the last record taken and whether the run was taken
        whole.  Kafka's rule for a partition's limit: a batch that does not
        fit ends the answer, except the answer's first (``first``), which goes
        whole however big, so that a consumer always gets on.  A stored batch
        may hold a whole produce request (thousands of records): between its
        Kafka batches the loop lets other tasks run (the writer sending the
        last answer while this one reads ahead)."""
        lsns = run.lsns
        epoch = lsn_epoch(lsns[0])
        if not m.known(epoch):
            known = await self.offsets(log_id, epoch)
            assert known is not None
            m = known
        shift = compose_lsn(epoch, 0) - m.base(epoch) + 1  # offset = lsn - shift
        # Kafka's partition leader epoch is an int32; logstrand's epochs stay
        # far below 2^31 (one per failover), the clamp only keeps the field valid.
        kafka_epoch = min(epoch, LEADER_EPOCH_MAX)
        offsets = [lsn - shift for lsn in lsns]
        a = bisect.bisect_left(offsets, offset)
        if run.txn_flags & CONTROL:
            # Each marker a control batch of its own, as Kafka writes them.
            rows = zip(offsets[a:], run.timestamps_ms[a:], run.payloads[a:], strict=True)
            marks = [_control(o, t, v, kafka_epoch) for o, t, v in rows]
            return m, [b for b in marks if b], offsets[-1], True
        parts, last, whole = await _batches(
            run, offsets, a, room, first=first, kafka_epoch=kafka_epoch, codec=codec
        )
        return m, parts, (offset - 1 if last is None else last), whole


async def _batches(
    run: RecordRun,
    offsets: list[int],
    a: int,
    room: int,
    *,
    first: bool,
    kafka_epoch: int,
    codec: int,
) -> tuple[list[bytes], int | None, bool]:
    """``_run``'s Kafka batches of the run's records from index ``a``: the
    batches, the offset of the last record taken (None: none), whether the
    run was taken whole."""
    packed = run.view.packed
    n = len(offsets)
    encoder = RunEncoder(run, offsets)
    # A transaction's records carry their producer id (Kafka's TRANSACTIONAL
    # batches): a read_committed consumer drops an aborted one's by it.
    producer = packed.producer if run.txn_flags & TRANSACTIONAL else None
    pid = -1 if producer is None else producer_of(producer[0])[0]
    step = max(
        1, min(FETCH_BATCH_RECORDS, CHUNK_BYTES * packed.count // (packed.payload_bytes + 1))
    )
    parts: list[bytes] = []
    size = 0
    lo = a
    while lo < n:
        if parts:
            await trio.lowlevel.checkpoint()
        # As many records as the room left takes at the run's mean size;
        # a batch over the room (the records bigger than the mean) is
        # made again with half as many, down to one record.
        left = room - size
        fit = max(1, min(step, left * packed.count // (packed.payload_bytes + 1)))
        while True:
            hi = min(n, lo + fit)
            part = encoder.batch(lo, hi, kafka_epoch, codec, pid)
            if len(part) <= left or hi - lo == 1:
                break
            fit = (hi - lo) // 2
        if len(part) > left and (parts or not first):
            # Not this answer's: the next one starts with it.
            return parts, (offsets[lo - 1] if lo > a else None), False
        parts.append(part)
        size += len(part)
        lo = hi
    return parts, offsets[-1], True


def _control(offset: int, ts: int, payload: bytes | None, kafka_epoch: int) -> bytes:
    """A marker as Kafka's control batch (b"" for a CONTROL record that is
    no marker: nothing a consumer needs)."""
    marker = decode_marker(payload)
    if marker is None:
        return b""
    commit, pid, _ = marker
    key, value = control_record(commit)
    return encode_columns([offset], [ts], [key], [value], None, kafka_epoch, 0, pid, control=True)

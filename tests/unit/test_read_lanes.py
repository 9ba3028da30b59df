"""A node's read streams (``storage/_reads.py``) with a fake LogsDB and a fake
connection: an idle stream sends nothing until its log's release pointer
moves, then only that log's stream wakes; a stream out of credit waits for
more; the connection's streams share one task and take turns; a stream past
the bound per connection is refused; a closed connection ends its streams."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from logstrand.batch import make_batch
from logstrand.errors import LogstrandError, Status
from logstrand.logsdb._scan import PackedRead
from logstrand.storage._metrics import NodeMetrics
from logstrand.storage._reads import ReadStreams
from logstrand.wire import ReadCredit, ReadRecords, StartRead, StopRead

if TYPE_CHECKING:
    from logstrand.storage._read_core import ReadFrom, ReadStreamCore

E1 = 1 << 32
METRICS = NodeMetrics(1)


@attrs.define
class FakeDB:
    """Every log holds one record per LSN up to ``stored``; releases as set."""

    release: dict[int, int] = attrs.Factory(dict)
    stored: int = 100 * E1
    floor: dict[int, int] = attrs.Factory(dict)

    def read_windows(self, log_id: int, step: ReadFrom, core: ReadStreamCore, **_: Any) -> Any:
        first = max(step.start, self.floor.get(log_id, 0) + 1)  # as LogsDB's low point
        last = min(step.until, first + step.max_records - 1)
        lsns = list(range(first, last + 1))
        batch = make_batch(lsns, [b"x"] * len(lsns), timestamps_ms=1, flags=[0] * len(lsns))
        got = PackedRead([batch], scanned_to=last)
        return got, [(batch, first, last)]

    def trim_point(self, log_id: int) -> int:
        return 0

    def clean_point(self, log_id: int) -> int:
        return 0

    def local_floor(self, log_id: int) -> int:
        return self.floor.get(log_id, 0)

    def release_of(self, log_id: int) -> int:
        return self.release.get(log_id, 0)


class NoEnds:
    async def epoch_end(self, log_id: int, epoch: int) -> None:
        raise AssertionError("no past epoch here")


@attrs.define(eq=False)
class FakeConn:
    sent: list[ReadRecords] = attrs.Factory(list)
    closed: bool = False
    protocol: int = 10
    bulk: trio.Lock = attrs.Factory(trio.Lock)

    async def send(self, msg: ReadRecords) -> None:
        self.sent.append(msg)
        await trio.lowlevel.checkpoint()

    async def wait_for_room(self, below: int | None = None) -> None:
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class SlowConn(FakeConn):
    """A connection whose socket takes nothing until ``drain``: each reply
    queues ``reply_bytes``."""

    reply_bytes: int = 3 << 20
    queued_bytes: int = 0
    drained: trio.Event = attrs.Factory(trio.Event)

    async def send(self, msg: ReadRecords) -> None:
        self.queued_bytes += self.reply_bytes
        await super().send(msg)

    async def wait_for_room(self, below: int | None = None) -> None:
        while below is not None and self.queued_bytes >= below:
            await self.drained.wait()
        await trio.lowlevel.checkpoint()

    def drain(self) -> None:
        self.queued_bytes = 0
        self.drained.set()
        self.drained = trio.Event()


def start(log: int, stream: int, credit: int = 1000) -> StartRead:
    return StartRead(stream, 1, log, E1 + 1, 2**64 - 1, credit, False, ())


async def settle() -> None:
    for _ in range(50):
        await trio.lowlevel.checkpoint()


async def test_idle_streams_are_silent_and_a_release_wakes_only_its_log(
    autojump_clock: trio.testing.MockClock,
) -> None:
    db = FakeDB({1: E1 + 3, 2: E1 + 2})
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        reads = ReadStreams(1, db, NoEnds(), METRICS, nursery)  # type: ignore[arg-type]
        for log in (1, 2, 3):
            reads.start(conn, start(log, stream=log))  # type: ignore[arg-type]
        await settle()
        first = [(m.stream_id, m.next_lsn) for m in conn.sent]
        # Each stream sent what was released (log 3: nothing, only its position).
        assert sorted(set(first)) == [(1, E1 + 4), (2, E1 + 3), (3, E1 + 1)]
        conn.sent.clear()
        await trio.sleep(2.5)  # longer than the old heartbeat
        assert conn.sent == []  # idle: not a message
        db.release[2] = E1 + 5
        reads.released(2)
        await settle()
        assert {m.stream_id for m in conn.sent} == {2}
        assert conn.sent[-1].next_lsn == E1 + 6
        assert reads.open_streams == 3
        reads.connection_closed(conn)  # type: ignore[arg-type]
        assert reads.open_streams == 0
        nursery.cancel_scope.cancel()


async def test_credit_bounds_what_a_stream_sends_and_more_credit_wakes_it() -> None:
    db = FakeDB({1: E1 + 50})
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        reads = ReadStreams(1, db, NoEnds(), METRICS, nursery)  # type: ignore[arg-type]
        reads.start(conn, start(1, stream=9, credit=10))  # type: ignore[arg-type]
        await settle()
        assert sum(sum(b.count for b in m.batches) for m in conn.sent) == 10
        reads.credit(conn, ReadCredit(9, 1, 15))  # type: ignore[arg-type]
        await settle()
        assert sum(sum(b.count for b in m.batches) for m in conn.sent) == 25
        reads.stop(conn, StopRead(9))  # type: ignore[arg-type]
        db.release[1] = E1 + 90
        reads.released(1)
        reads.credit(conn, ReadCredit(9, 1, 100))  # type: ignore[arg-type]
        await settle()
        assert sum(sum(b.count for b in m.batches) for m in conn.sent) == 25  # stopped
        nursery.cancel_scope.cancel()


async def test_streams_of_a_connection_take_turns_and_are_bounded() -> None:
    db = FakeDB({1: E1 + 5000, 2: E1 + 2})
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        reads = ReadStreams(  # type: ignore[arg-type]
            1, db, NoEnds(), METRICS, nursery, streams_per_connection=2
        )
        reads.start(conn, start(1, stream=1, credit=5000))  # type: ignore[arg-type]
        reads.start(conn, start(2, stream=2))  # type: ignore[arg-type]
        with pytest.raises(LogstrandError) as refused:
            reads.start(conn, start(3, stream=3))  # type: ignore[arg-type]
        assert refused.value.status == Status.OVERLOADED
        await settle()
        order = [m.stream_id for m in conn.sent]
        # The long backfill of log 1 does not go first in full: log 2's
        # stream gets its turn after one step of it.
        assert order.index(2) <= 2 < len(order)
        nursery.cancel_scope.cancel()


async def test_a_connection_reads_ahead_of_its_socket_by_one_reply_at_most() -> None:
    """A step reads LogsDB without yielding, so while the connection's
    queue had room (64 MiB) steps ran back to back and its writer sent the
    first reply only once they stopped: a reader of 200 MB of 10 KiB
    records waited 460 ms for its first batch (issue 59).  Now a stream
    reads its next step only while less than ``READ_AHEAD_BYTES`` wait to
    be sent: one reply going out while the next is read."""
    from logstrand.storage._reads import READ_AHEAD_BYTES

    db = FakeDB({1: E1 + 100_000})
    conn = SlowConn()
    async with trio.open_nursery() as nursery:
        reads = ReadStreams(1, db, NoEnds(), METRICS, nursery)  # type: ignore[arg-type]
        reads.start(conn, start(1, stream=1, credit=100_000))  # type: ignore[arg-type]
        await settle()
        ahead = len(conn.sent)
        # Replies of 3 MiB: queued 0, 3, 6 MiB before each read, then 9 >= 8.
        assert ahead == -(-READ_AHEAD_BYTES // conn.reply_bytes)
        conn.drain()
        await settle()
        assert len(conn.sent) == 2 * ahead  # as much again, no more
        nursery.cancel_scope.cancel()


def test_a_streams_first_read_is_small_and_the_next_ones_full() -> None:
    """A reader delivers nothing before every node's first answer: the
    first read of a stream takes ``FIRST_READ_BYTES`` (one stored batch at
    least), the next ones ``READ_BATCH_BYTES``."""
    from logstrand.storage._read_core import (
        FIRST_READ_BYTES,
        READ_BATCH_BYTES,
        ReadFrom,
        ReadStreamCore,
    )

    core = ReadStreamCore(1, E1 + 1, E1 + 10_000, 8192, scd=False)
    first = core.step(E1 + 10_000)
    assert isinstance(first, ReadFrom)
    assert first.max_bytes == FIRST_READ_BYTES < READ_BATCH_BYTES
    core.sent(E1 + 50)
    after = core.step(E1 + 10_000)
    assert isinstance(after, ReadFrom)
    assert after.max_bytes == READ_BATCH_BYTES


async def test_a_local_floor_is_said_and_an_older_reader_is_refused_below_it() -> None:
    """A tiered log's copies at or below the node's local floor are in the
    object store: the stream sends what is above it and says where the floor
    is, so the reader reads the rest there; a reader of protocol 9, which
    would take those LSNs for missing, is refused below the floor."""
    db = FakeDB({1: E1 + 50}, floor={1: E1 + 20})
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        reads = ReadStreams(1, db, NoEnds(), METRICS, nursery)  # type: ignore[arg-type]
        reads.start(conn, start(1, stream=1))  # type: ignore[arg-type]
        await settle()
        lsns = [lsn for m in conn.sent for b in m.batches for lsn in b.lsns()]
        assert lsns == list(range(E1 + 21, E1 + 51))
        assert {m.local_floor for m in conn.sent} == {E1 + 20}
        old = FakeConn(protocol=9)
        with pytest.raises(LogstrandError) as err:
            reads.start(old, start(1, stream=2))  # type: ignore[arg-type]
        assert err.value.status == Status.NOTSUPPORTED
        above = StartRead(3, 1, 1, E1 + 21, 2**64 - 1, 1000, False, ())
        reads.start(old, above)  # type: ignore[arg-type]
        await settle()
        assert old.sent
        assert {m.local_floor for m in old.sent} == {0}
        nursery.cancel_scope.cancel()

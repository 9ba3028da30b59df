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

    def read_windows(self, log_id: int, step: ReadFrom, core: ReadStreamCore, **_: Any) -> Any:
        last = min(step.until, step.start + step.max_records - 1)
        lsns = list(range(step.start, last + 1))
        batch = make_batch(lsns, [b"x"] * len(lsns), timestamps_ms=1, flags=[0] * len(lsns))
        got = PackedRead([batch], scanned_to=last)
        return got, [(batch, step.start, last)]

    def trim_point(self, log_id: int) -> int:
        return 0

    def clean_point(self, log_id: int) -> int:
        return 0

    def release_of(self, log_id: int) -> int:
        return self.release.get(log_id, 0)


class NoEnds:
    async def epoch_end(self, log_id: int, epoch: int) -> None:
        raise AssertionError("no past epoch here")


@attrs.define(eq=False)
class FakeConn:
    sent: list[ReadRecords] = attrs.Factory(list)
    closed: bool = False
    bulk: trio.Lock = attrs.Factory(trio.Lock)

    async def send(self, msg: ReadRecords) -> None:
        self.sent.append(msg)
        await trio.lowlevel.checkpoint()

    async def wait_for_room(self) -> None:
        await trio.lowlevel.checkpoint()


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

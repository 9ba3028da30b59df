"""Read streams kept between fetches: found again by (log, next offset),
bounded in number, closed when idle."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from logstrand.batch import make_batch
from logstrand.client._views import BatchView, RecordRun
from logstrand.errors import LogstrandError
from logstrand.kafka import _sessions
from logstrand.kafka._fetch_read import AHEAD_BYTES_MAX, FetchReads
from logstrand.kafka._offsets import OffsetMap
from logstrand.kafka._records import decode_batches
from logstrand.kafka._sessions import Session, Sessions
from logstrand.types import compose_lsn


class _Stream:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


async def _empty() -> Any:
    nothing: list[list[Any]] = []
    for items in nothing:  # an async generator that yields nothing
        yield items


def _session() -> tuple[Session, _Stream]:
    stream = _Stream()
    return Session(stream, _empty()), stream  # type: ignore[arg-type]


async def test_a_kept_stream_is_found_at_the_next_offset_only() -> None:
    kept = Sessions()
    s, stream = _session()
    await kept.keep(1, 100, s)
    assert kept.take(1, 99) is None
    assert kept.take(2, 100) is None
    assert kept.take(1, 100) is s
    assert kept.take(1, 100) is None  # taken: the caller owns it
    assert not stream.closed


async def test_streams_beyond_the_bound_close_oldest_first() -> None:
    kept = Sessions()
    made = []
    for i in range(_sessions.SESSIONS_MAX + 3):
        s, stream = _session()
        made.append(stream)
        await kept.keep(i, 0, s)
    assert len(kept) == _sessions.SESSIONS_MAX
    assert [st.closed for st in made[:3]] == [True, True, True]
    assert not any(st.closed for st in made[3:])


async def test_an_idle_stream_is_closed_at_the_next_look(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept = Sessions()
    s, old = _session()
    await kept.keep(1, 0, s)
    await trio.sleep(_sessions.IDLE_S + 1)
    s2, new = _session()
    await kept.keep(2, 0, s2)
    assert old.closed
    assert not new.closed
    assert kept.take(1, 0) is None


# -- reading one answer ahead -----------------------------------------------------------


class _Chunks:
    """A read stream of epoch 1's records 1..n (1 KiB each), ``per`` to a
    batch of items; counts the batches taken from it, and waits forever
    after ``hold`` of them (the nodes sending nothing more)."""

    def __init__(self, n: int, per: int, hold: int | None = None, start: int = 1) -> None:
        self.n, self.per, self.hold = n, per, hold
        self.pulled = 0
        self.next = start
        self.closed = False
        self.opened: list[_Chunks] = []

    def read(self, log_id: int, start_lsn: int, until: int) -> _Chunks:
        """``client.read``: the first stream is this one; a later one is new,
        from ``start_lsn`` (kept in ``opened``)."""
        if self.next == 1 and not self.pulled and not self.opened:
            self.opened.append(self)
            return self
        other = _Chunks(self.n, self.per, self.hold, start=start_lsn & 0xFFFFFFFF)
        self.opened.append(other)
        return other

    def batches(self) -> Any:
        return self

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> list[Any]:
        if self.hold is not None and self.pulled >= self.hold:
            await trio.sleep_forever()
        first = self.next
        if first > self.n:
            raise StopAsyncIteration
        count = min(self.per, self.n + 1 - first)
        lsns = [compose_lsn(1, first + i) for i in range(count)]
        pb = make_batch(lsns, [_value(first + i) for i in range(count)], timestamps_ms=5)
        self.pulled += 1
        self.next += count
        return [RecordRun(BatchView(pb, lsns[0], lsns[-1]), 0, count)]

    async def aclose(self) -> None:
        self.closed = True


def _value(i: int) -> bytes:
    return b"r%d" % i + b"." * 1020


class _Reads(FetchReads):
    def __init__(self, nursery: trio.Nursery, stream: _Chunks) -> None:
        self.client = SimpleNamespace(nursery=nursery, read=stream.read)  # type: ignore[assignment]
        self.sessions = Sessions()
        self.dataloss = 0

    async def offsets(self, log_id: int, epoch: int, wait_s: float = 0.0) -> OffsetMap | None:
        return MAP


MAP = OffsetMap(((1, 0),), 0)


def _values(data: bytes) -> list[bytes | None]:
    return [r.value for b in decode_batches(data) for r in b.records]


async def test_the_next_answer_is_read_while_the_consumer_takes_this_one() -> None:
    stream = _Chunks(5_000, per=100)
    tail = compose_lsn(1, 5_000)
    async with trio.open_nursery() as nursery:
        reads = _Reads(nursery, stream)
        first = await reads._read(7, MAP, 0, 150_000, tail)
        got = _values(first)
        await trio.testing.wait_all_tasks_blocked()
        # The answer for the offset after this one's records is ready before
        # anyone asked: more of the stream was read than this answer needed.
        kept = reads.sessions.take(7, len(got))
        assert kept is not None
        assert kept.ahead is not None
        assert kept.ahead.done.is_set()
        taken = stream.pulled
        await reads.sessions.keep(7, len(got), kept)
        second = await reads._read(7, MAP, len(got), 150_000, tail)
        both = got + _values(second)
        assert both == [_value(i) for i in range(1, len(both) + 1)]
        assert stream.pulled == taken  # the second answer was the one read ahead
        # A partition limit above AHEAD_BYTES_MAX is never read ahead.
        await reads.sessions.close_all()
        big = await reads._read(7, MAP, len(both), AHEAD_BYTES_MAX + 1, tail)
        assert _values(big)[0] == _value(len(both) + 1)
        kept = reads.sessions.take(7, len(both) + len(_values(big)))
        assert kept is not None
        assert kept.ahead is None
        await _sessions.close(kept)


async def test_closing_a_session_cancels_its_read_ahead() -> None:
    stream = _Chunks(5_000, per=100, hold=2)  # the read ahead waits on the nodes
    async with trio.open_nursery() as nursery:
        reads = _Reads(nursery, stream)
        first = await reads._read(7, MAP, 0, 150_000, compose_lsn(1, 5_000))
        await trio.testing.wait_all_tasks_blocked()
        kept = reads.sessions.take(7, len(_values(first)))
        assert kept is not None
        assert kept.ahead is not None
        assert not kept.ahead.done.is_set()
        await _sessions.close(kept)
        with trio.fail_after(1):
            await kept.ahead.done.wait()
        assert stream.closed
        with pytest.raises(LogstrandError):
            await kept.ahead.result()
    # The nursery ended: no task was left behind.


async def test_a_big_stored_batch_is_cut_to_the_limit_and_lets_other_tasks_run() -> None:
    """A stored batch of 5,000 records of 1 KiB (a whole produce request):
    an answer stops at its limit, not past it, and the next goes on where it stopped,
    and while one is made the loop runs other tasks (the writer of the last
    answer) instead of encoding 5 MB in one go."""
    stream = _Chunks(5_000, per=5_000)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        reads = _Reads(nursery, stream)
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        first = await reads._read(7, MAP, 0, 150_000, compose_lsn(1, 5_000))
        assert ticks > before  # the ticker ran while the answer was made
        # Up to the limit and not past it (Kafka's rule), within a record or two.
        assert 150_000 - 2 * 1_100 <= len(first) <= 150_000
        got = _values(first)
        second = await reads._read(7, MAP, len(got), 150_000, compose_lsn(1, 5_000))
        both = got + _values(second)
        assert both == [_value(i) for i in range(1, len(both) + 1)]
        await reads.sessions.close_all()
        nursery.cancel_scope.cancel()

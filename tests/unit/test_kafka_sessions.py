"""Read streams kept between fetches: found again by (log, next offset),
bounded in number, closed when idle."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from logstrand.kafka import _sessions
from logstrand.kafka._sessions import Session, Sessions


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

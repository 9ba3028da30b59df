"""A node's DROP_COPIES shell (``storage._drops``): the offset map of a part
is rebuilt beside the loop, not on it.  (Rebuilt on the loop, half a million
keys stopped every node for 3-4 s at each part of a 5-million-key pass, and
each then held its sequencers down as a node that had paused.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import trio

from logstrand.compaction import OffsetMap
from logstrand.compaction._offset_map import _HASH
from logstrand.epochstore import LogAttributes
from logstrand.errors import Status
from logstrand.storage._drops import Drops
from logstrand.wire import DropCopies, DropReply

if TYPE_CHECKING:
    from collections.abc import Generator

KEYS = 524_288  # the largest part ``make soak``'s 5-million-key pass sends


class FakeDb:
    def __init__(self) -> None:
        self.maps: list[OffsetMap] = []
        self.reclaimed: list[int] = []

    def drop_copies(
        self, msg: DropCopies, offsets: OffsetMap | None = None
    ) -> Generator[int, None, DropReply]:
        if offsets is None:  # as NodeStore.drop_copies: built here, on the loop
            offsets = OffsetMap.from_entries(msg.offsets)
        self.maps.append(offsets)
        yield 100
        return DropReply(msg.request_id, int(Status.OK), 1, 0, 0, 0, 0, msg.end_lsn)

    def set_clean_point(self, log_id: int, lsn: int) -> None: ...

    async def reclaim(self, log_id: int) -> None:
        self.reclaimed.append(log_id)


class View:
    def log_attributes(self, log_id: int) -> LogAttributes:
        return LogAttributes(replication_factor=1, cleanup_policy="compact")

    async def refresh(self) -> None: ...


def part(keys: int) -> bytes:
    rng = np.random.default_rng(7)
    h = rng.integers(1, 2**63, size=(keys, 2), dtype=np.uint64).astype(_HASH)
    m = OffsetMap(keys * 60)
    m.put_many(h, np.arange(1, keys + 1, dtype=np.uint64))
    return m.entries()


async def test_the_loop_keeps_running_while_a_large_map_is_rebuilt() -> None:
    entries = part(KEYS)
    db = FakeDb()
    drops = Drops(1, db, View(), None)  # type: ignore[arg-type]
    msg = DropCopies(9, 1, 1000, 0, 0, 0, entries)
    gaps: list[float] = []
    done = trio.Event()

    async def ticker() -> None:
        last = trio.current_time()
        while not done.is_set():
            await trio.sleep(0.005)
            now = trio.current_time()
            gaps.append(now - last)
            last = now

    async with trio.open_nursery() as n:
        n.start_soon(ticker)
        await trio.sleep(0.02)  # the ticker runs
        reply = await drops.drop(msg)
        done.set()
    assert reply.status == Status.OK
    assert db.reclaimed == [1]
    assert db.maps[0].size == KEYS
    # Built on the loop, the map stopped it for over a second here.
    assert max(gaps) < 0.4, max(gaps)


async def test_a_malformed_map_is_refused_not_fatal() -> None:
    drops = Drops(1, FakeDb(), View(), None)  # type: ignore[arg-type]
    replies: list[Any] = []

    class Conn:
        async def reply(self, r: Any) -> None:
            replies.append(r)

    await drops.handle_drop(Conn(), DropCopies(3, 1, 10, 0, 0, 0, b"x" * 25))  # type: ignore[arg-type]
    assert replies[0].status == Status.INVALID_PARAM
    with pytest.raises(ValueError, match="whole number of slots"):
        OffsetMap.from_entries(b"x" * 25)

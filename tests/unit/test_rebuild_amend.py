"""A rebuilding leader's AMEND to the holders of the kept copies is sent
again when a holder does not take it (slow, down for a moment): a copy that
kept its old copyset could be missed by a later rebuilding."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from logstrand.errors import Status
from logstrand.packed import PackedBatch
from logstrand.rebuilding._core import NewCopies
from logstrand.storage import _rebuild
from logstrand.wire import Amend, AmendReply

if TYPE_CHECKING:
    import trio


class FlakyPeers:
    """Node 2 answers no AMEND the first ``misses`` times; node 3 always."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.sent: list[int] = []

    async def request(self, node: int, make: Any, timeout_s: float) -> Any:
        msg = make(len(self.sent) + 1)
        assert isinstance(msg, Amend)
        self.sent.append(node)
        if node == 2 and self.misses > 0:
            self.misses -= 1
            return None  # timed out
        return AmendReply(msg.request_id, int(Status.OK), node, 1)


def rebuilder(peers: FlakyPeers, amended: list[tuple[Any, ...]]) -> _rebuild.Rebuilder:
    db = SimpleNamespace(amend=lambda *args: amended.append(args))
    committer = SimpleNamespace(db=db)
    return _rebuild.Rebuilder(1, None, committer, peers, None, None)  # type: ignore[arg-type]


async def test_an_amend_a_holder_missed_is_sent_again(autojump_clock: trio.abc.Clock) -> None:
    pb = PackedBatch.for_append([None], [b"x"]).restamp(
        first_lsn=(5 << 32) | 1, timestamp_ms=1000, wave=1, copyset=(1, 2, 3)
    )
    plan = NewCopies(recipients=(4,), copyset=(2, 3, 4), amend=(2, 3), short=0)
    amended: list[tuple[Any, ...]] = []
    peers = FlakyPeers(misses=2)
    await rebuilder(peers, amended)._amend(7, pb, plan)
    assert len(amended) == 1  # the leader's own copy
    assert peers.sent == [2, 2, 2, 3]  # two misses, then taken; node 3 at once
    peers = FlakyPeers(misses=10)  # never taken: bounded, then a warning
    await rebuilder(peers, amended)._amend(7, pb, plan)
    assert peers.sent == [2] * _rebuild.AMEND_ATTEMPTS + [3]

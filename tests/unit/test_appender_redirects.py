"""The client's append loop (``client._appender``) against nodes that send an
append back and forth: it follows a redirect at once, but one that leads back
to a node that already sent the append away waits, as any refusal does.

(Two nodes whose views disagree for a while, e.g. about a node in its
hold-down, bounced thousands of appends between them as fast as they
answered, each bounce a round trip: the restart of a node with 20,000
active logs timed out 1,650 appends.)"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from logstrand.batch import PackedBatch
from logstrand.client._appender import Appender
from logstrand.client._settings import ClientSettings
from logstrand.errors import Status, TransientError
from logstrand.wire import AppendReply


class FakeView:
    def __init__(self, owner: int) -> None:
        self.owner = owner
        self.up = frozenset({1, 2, 3})
        self.astore = None
        self.refreshes = 0

    def log_attributes(self, log_id: int) -> None:
        return None

    def sequencer_node(self, log_id: int) -> int:
        return self.owner

    def suspected(self, node: int) -> bool:
        return False

    async def refresh(self) -> None:
        self.refreshes += 1


class Link:
    def __init__(self, node: int, nodes: Nodes) -> None:
        self.node, self.nodes = node, nodes
        self.conn = type("Conn", (), {"protocol": 0})()

    async def request_or_give_up(self, request: Any, rid: int, *_: Any) -> tuple[Any, bool]:
        await trio.lowlevel.checkpoint()
        self.nodes.asked.append(self.node)
        to = self.nodes.redirect.get(self.node)
        if to is None:
            return AppendReply(rid, int(Status.OK), 700, 1), False
        return AppendReply(rid, int(Status.REDIRECTED), message="elsewhere", redirect=to), False


class Nodes:
    """Links to nodes that each send every append to ``redirect[node]``."""

    def __init__(self, redirect: dict[int, int]) -> None:
        self.redirect = redirect
        self.asked: list[int] = []
        self.rid = 0

    async def get(self, node: int) -> Link:
        return Link(node, self)

    def next_request_id(self) -> int:
        self.rid += 1
        return self.rid


class Watch:
    suspect_after_s = 10.0

    async def wait_gone(self, node: int) -> None:
        await trio.sleep_forever()


async def append_through(view: FakeView, nodes: Nodes, timeout_s: float) -> int:
    settings = ClientSettings(append_timeout_s=timeout_s, idempotent=False)
    error: TransientError | None = None
    async with trio.open_nursery() as nursery:
        appender = Appender(view, nodes, nursery, settings, Watch())  # type: ignore[arg-type]
        try:
            lsn = await appender.send(
                5, lambda codec: PackedBatch.for_append([None], [b"x"], codec)
            )
        except TransientError as exc:
            error = exc
        nursery.cancel_scope.cancel()
    if error is not None:
        raise error
    return lsn


async def test_a_redirect_is_followed_at_once() -> None:
    nodes = Nodes({1: 3})
    assert await append_through(FakeView(owner=1), nodes, 5.0) == 700
    assert nodes.asked == [1, 3]


async def test_a_redirect_back_and_forth_waits_instead_of_bouncing() -> None:
    # Node 1 says node 2 runs the log, node 2 says node 1 does.
    nodes = Nodes({1: 2, 2: 1})
    view = FakeView(owner=1)
    with pytest.raises(TransientError, match="REDIRECTED"):
        await append_through(view, nodes, 0.5)
    # Backing off from 10 ms to 0.5 s: a handful of rounds in half a second
    # (the loop that followed every redirect asked thousands of times).
    assert 4 <= len(nodes.asked) <= 40, len(nodes.asked)
    assert view.refreshes >= 2


async def test_the_views_agree_again_and_the_append_goes_through() -> None:
    nodes = Nodes({1: 2, 2: 1})
    view = FakeView(owner=1)

    async def agree_soon() -> None:
        await trio.sleep(0.2)
        del nodes.redirect[2]  # node 2 sees it runs the log after all

    async with trio.open_nursery() as n:
        n.start_soon(agree_soon)
        assert await append_through(view, nodes, 5.0) == 700
    assert nodes.asked[-1] == 2

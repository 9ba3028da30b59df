"""A transaction's ADDs (``client._transaction._Adds``): steps that run at
once share one ADD, and a failed one raises where it was sent while the
others ask again."""

from __future__ import annotations

import pytest
import trio

from logstrand.client._transaction import _Adds
from logstrand.errors import LogstrandError


async def test_appends_started_together_share_one_add() -> None:
    adds = _Adds()
    sent: list[tuple[tuple[int, ...], tuple[str, ...]]] = []

    async def send(logs: tuple[int, ...], groups: tuple[str, ...]) -> None:
        sent.append((logs, groups))
        await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        for log in (3, 1, 2):
            nursery.start_soon(adds.ensure, send, [log], [])
        nursery.start_soon(adds.ensure, send, [], ["g"])
    assert sent == [((1, 2, 3), ("g",))]
    # Added once: asking again sends nothing; a new log goes alone.
    await adds.ensure(send, [1, 2], ["g"])
    await adds.ensure(send, [4], [])
    assert sent[1:] == [((4,), ())]
    assert adds.logs == {1, 2, 3, 4}


async def test_steps_that_come_during_an_add_share_the_next() -> None:
    adds = _Adds()
    sent: list[tuple[int, ...]] = []
    release = trio.Event()

    async def send(logs: tuple[int, ...], groups: tuple[str, ...]) -> None:
        sent.append(logs)
        if len(sent) == 1:
            await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(adds.ensure, send, [1], [])
        await trio.testing.wait_all_tasks_blocked()
        for log in (2, 3, 1):  # 1 is in flight already: it waits for it
            nursery.start_soon(adds.ensure, send, [log], [])
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert sent == [(1,), (2, 3)]


async def test_a_failed_add_raises_where_sent_and_the_others_ask_again() -> None:
    adds = _Adds()
    sent: list[tuple[int, ...]] = []

    async def send(logs: tuple[int, ...], groups: tuple[str, ...]) -> None:
        sent.append(logs)
        await trio.sleep(0.01)
        if len(sent) == 1:
            raise LogstrandError("the coordinator moved")

    failed: list[int] = []

    async def step(log: int) -> None:
        try:
            await adds.ensure(send, [log], [])
        except LogstrandError:
            failed.append(log)

    async with trio.open_nursery() as nursery:
        for log in (1, 2):
            nursery.start_soon(step, log)
    # The sender (whichever trio ran first) failed; the other asked again, alone.
    [sender] = failed
    [other] = {1, 2} - {sender}
    assert sent == [(1, 2), (other,)]
    assert adds.logs == {other}


@pytest.mark.parametrize("logs", [[], [5]])
async def test_nothing_new_sends_nothing(logs: list[int]) -> None:
    adds = _Adds(logs={5})
    calls = 0

    async def send(logs: tuple[int, ...], groups: tuple[str, ...]) -> None:
        nonlocal calls
        calls += 1

    await adds.ensure(send, logs, [])
    assert calls == 0

"""A server's bounds on what it takes in (``net._intake``), on trio's virtual
clock: requests counted until answered, pools and users' budgets, the
allowance, forgotten requests."""

from __future__ import annotations

import trio
import trio.testing

from logstrand.batch import Codec, PackedBatch
from logstrand.net import Budget, Intake, IntakeLimits
from logstrand.wire import Append, AppendReply, ErrorReply, Ping, Pong, Release

LIMITS = IntakeLimits(requests_max=2, request_bytes_max=1000, allowance=100)


def nothing_queued() -> int:
    return 0


def ping(rid: int) -> Ping:
    return Ping(rid)


async def take(intake: Intake, msg: object, size: int) -> None:
    """What the connection does for one whole frame of ``size`` bytes."""
    got = await intake.reserve(size)
    assert got == size
    intake.received(size, size)
    intake.decoded(msg, size)


async def test_requests_count_until_answered_and_the_connection_waits_its_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = Budget(10_000)
    intake = Intake(LIMITS, pool)
    await take(intake, ping(1), 10)
    await take(intake, ping(2), 10)
    assert intake.requests == 2
    assert pool.used == 20
    turns: list[float] = []

    async def reader() -> None:
        await intake.wait_turn(nothing_queued)
        turns.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(5)
        assert turns == []  # two unanswered: not read
        intake.settle(Pong(7))  # answers no request of this connection
        await trio.sleep(1)
        assert turns == []
        intake.settle(Pong(1))
    assert turns == [6.0]
    assert intake.requests == 1
    assert pool.used == 10
    # An error answers a request just as well.
    intake.settle(ErrorReply(2, 5, "no"))
    assert intake.requests == 0
    assert pool.used == 0


async def test_a_message_without_an_answer_is_done_when_decoded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = Budget(10_000)
    intake = Intake(LIMITS, pool)
    await take(intake, Release(1, 5), 40)
    assert intake.requests == 0
    assert pool.used == 0


async def test_bytes_bound_a_connection_but_one_larger_request_goes_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = Budget(1 << 20)
    intake = Intake(LIMITS, pool)
    big = Append(1, 1, PackedBatch.for_append([None], [b"x" * 5000], Codec.NONE, None))
    # Nothing held: a request far over request_bytes_max is still taken.
    await take(intake, big, 5000)
    with trio.move_on_after(1) as scope:
        await intake.wait_turn(nothing_queued)
    assert scope.cancelled_caught
    intake.settle(AppendReply(1, 0, 10, 1))
    await intake.wait_turn(nothing_queued)


async def test_replies_the_peer_does_not_read_stop_its_requests(
    autojump_clock: trio.testing.MockClock,
) -> None:
    intake = Intake(IntakeLimits(replies_queued_max=3), Budget(1000))
    with trio.move_on_after(1) as scope:
        await intake.wait_turn(lambda: 3)
    assert scope.cancelled_caught
    await intake.wait_turn(lambda: 2)


async def test_the_pool_is_shared_and_the_allowance_keeps_small_requests_moving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = Budget(1000)
    a, b = Intake(LIMITS, pool), Intake(LIMITS, pool)
    assert await a.reserve(5000) == 1000  # as much as the pool has
    a.received(1000, 1000)  # a partial frame: held
    assert pool.used == 1000
    # b holds nothing: it may take its allowance even so.
    assert await b.reserve(5000) == LIMITS.allowance
    b.received(30, LIMITS.allowance)
    assert b.held == 30
    # Now b holds something: it waits for the pool, until a gives back.
    got: list[int] = []

    async def more() -> None:
        got.append(await b.reserve(500))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(more)
        await trio.sleep(3)
        assert got == []
        a.close()
    assert got == [500]


async def test_a_users_budget_spans_its_connections(autojump_clock: trio.testing.MockClock) -> None:
    pool, user = Budget(1 << 20), Budget(300)
    a, b = Intake(LIMITS, pool, user), Intake(LIMITS, pool, user)
    assert await a.reserve(1000) == 300
    a.received(300, 300)
    assert await b.reserve(1000) == LIMITS.allowance  # only its allowance
    b.received(LIMITS.allowance, LIMITS.allowance)
    with trio.move_on_after(2) as scope:
        await b.reserve(1)
    assert scope.cancelled_caught
    assert user.used == 300 + LIMITS.allowance
    a.close()
    b.close()
    assert user.used == 0
    assert pool.used == 0


async def test_a_request_nobody_answers_stops_counting_after_its_age(
    autojump_clock: trio.testing.MockClock,
) -> None:
    abandoned: list[int] = []
    limits = IntakeLimits(requests_max=1, request_age_max_s=60)
    intake = Intake(limits, Budget(1000), on_abandoned=abandoned.append)
    await take(intake, ping(1), 10)
    t0 = trio.current_time()
    await intake.wait_turn(nothing_queued)  # waits, then forgets it
    assert trio.current_time() - t0 >= 60
    assert abandoned == [1]
    assert intake.requests == 0
    # Its late answer changes nothing.
    intake.settle(Pong(1))
    assert intake.requests == 0


async def test_the_frame_deadline_grows_with_the_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    intake = Intake(IntakeLimits(frame_grace_s=10, frame_min_rate=1 << 20), Budget(1))
    assert intake.frame_deadline(100.0, 1 << 20) == 111.0
    assert intake.frame_deadline(100.0, 32 << 20) == 142.0


async def test_a_request_of_many_logs_weighs_one_request_per_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An ``AppendMany`` of three batches counts as three requests (the
    bound is on work in flight, not on messages) until its one answer."""
    from logstrand.wire import AppendMany, AppendManyReply

    intake = Intake(IntakeLimits(requests_max=4, request_bytes_max=10_000), Budget(10_000))
    batch = PackedBatch.for_append([None], [b"x"], Codec.NONE)
    await take(intake, AppendMany(1, (1, 2, 3), (batch, batch, batch)), 100)
    assert intake.requests == 3
    assert intake.may_read(0)
    await take(intake, AppendMany(2, (4,), (batch,)), 50)
    assert intake.requests == 4
    assert not intake.may_read(0)
    intake.settle(AppendManyReply(1, (0, 0, 0), (1, 2, 3), (0, 0, 0), (0, 0, 0), ("", "", "")))
    assert intake.requests == 1
    assert intake.request_bytes == 50


async def test_a_store_of_many_logs_holds_each_entry_until_its_own_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The entries of a ``StoreMany`` are STOREs of their own: each counts
    (with its share of the frame) until an answer names it, whether alone
    or among others in a ``StoreReplies``."""
    from logstrand.batch import make_batch
    from logstrand.wire import Store, StoreMany, StoreReplies, StoreReply

    pool = Budget(10_000)
    intake = Intake(IntakeLimits(requests_max=8, request_bytes_max=10_000), pool)
    b = make_batch([(1 << 32) | 1], [b"x"], timestamps_ms=[1], copyset=(1, 2), wave=1)
    stores = [Store.of(sid, 9, 1, (1, 2), 0, True, b) for sid in (11, 12, 13)]
    await take(intake, StoreMany.of(stores), 301)
    assert intake.requests == 3
    assert intake.request_bytes == 301
    intake.settle(StoreReply(12, 9, 0, 2))
    assert intake.requests == 2
    assert intake.request_bytes == 201  # the first entry holds the odd byte
    intake.settle(StoreReplies.of(2, [StoreReply(11, 9, 0, 2), StoreReply(13, 9, 0, 2)]))
    assert intake.requests == 0
    assert intake.request_bytes == 0
    assert pool.used == 0

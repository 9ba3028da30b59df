"""The tickets of records appended from other threads (``client._delivery``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from logstrand.client._accumulator import Accumulator
from logstrand.client._batcher import _finish_all
from logstrand.client._delivery import Delivery, Waiters
from logstrand.errors import Status, TransientError


def _acc() -> Accumulator:
    return Accumulator(1 << 20, 1.0, lambda: None)


def _later(s: float, fn: object, *args: object) -> None:
    threading.Timer(s, fn, args).start()  # type: ignore[arg-type]


def test_a_delivery_finished_before_anyone_looks_never_makes_a_lock() -> None:
    acc = _acc()
    d = Delivery(acc, 10, None)
    d.finish(42, None)
    assert "_condition" not in d.__dict__
    assert d.done()
    assert d.result() == 42
    assert d.exception() is None
    assert not d.cancel()
    assert not d.cancelled()


def test_a_thread_waiting_on_a_delivery_is_woken_by_its_finish() -> None:
    d = Delivery(_acc(), 10, None)
    _later(0.1, d.finish, 7, None)
    t0 = time.monotonic()
    assert d.result(5) == 7
    assert time.monotonic() - t0 < 2
    with pytest.raises(concurrent.futures.TimeoutError):
        Delivery(_acc(), 10, None).result(0.05)


def test_a_failed_delivery_raises_its_error_to_every_kind_of_waiter() -> None:
    d = Delivery(_acc(), 10, None)
    _later(0.05, d.finish, 0, TransientError("gone", Status.TIMEDOUT))
    with pytest.raises(TransientError, match="gone"):
        d.result(5)
    assert isinstance(d.exception(), TransientError)
    with pytest.raises(TransientError):
        d.result()  # the quick path, once finished


def test_wait_as_completed_and_callbacks_work_before_and_after_finish() -> None:
    acc = _acc()
    ds = [Delivery(acc, 10, None) for _ in range(4)]
    seen: list[int] = []
    ds[0].add_done_callback(lambda f: seen.append(f.result()))
    for i, d in enumerate(ds):
        _later(0.02 * (i + 1), d.finish, 100 + i, None)
    done, not_done = concurrent.futures.wait(ds, timeout=5)
    assert len(done) == 4
    assert not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(ds, timeout=5)) == [
        100,
        101,
        102,
        103,
    ]
    ds[1].add_done_callback(lambda f: seen.append(f.result()))  # already done: called now
    assert seen == [100, 101]


def test_asyncio_can_await_a_delivery() -> None:
    d = Delivery(_acc(), 10, None)

    async def main() -> int:
        _later(0.05, d.finish, 9, None)
        return await asyncio.wrap_future(d)

    assert asyncio.run(main()) == 9


def test_finish_frees_the_room_and_calls_on_delivery_even_if_it_fails() -> None:
    acc = _acc()
    calls: list[tuple[int, object]] = []

    def on_delivery(lsn: int, err: BaseException | None) -> None:
        calls.append((lsn, err))
        raise RuntimeError("a user's bug")

    d = Delivery(acc, 10, on_delivery)
    acc.bytes, acc.outstanding = 10, 1
    d.finish(5, None)
    assert calls == [(5, None)]
    assert acc.pending() == 0
    assert acc.bytes == 0


def test_each_record_of_a_failed_batch_gets_its_own_copy_of_the_error() -> None:
    acc = _acc()
    ds = [Delivery(acc, 1, None) for _ in range(3)]
    error = TransientError("the batch failed", Status.TIMEDOUT)
    _finish_all(ds, 0, error)
    errors = [d.exception() for d in ds]
    assert all(isinstance(e, TransientError) and e.status is Status.TIMEDOUT for e in errors)
    assert all(str(e) == str(error) for e in errors)
    assert len({id(e) for e in errors}) == 3
    ok = [Delivery(acc, 1, None) for _ in range(3)]
    _finish_all(ok, 10, None)
    assert [d.result() for d in ok] == [10, 11, 12]


def test_a_threads_waiter_is_reused_and_replaced_after_a_timeout() -> None:
    waiters = Waiters(_acc())
    w = waiters.get(10)
    _later(0.05, w.finish, 3, None)
    assert waiters.outcome(w, 5) == 3
    assert waiters.get(10) is w  # the same lock, held again, for the next record
    with pytest.raises(TransientError, match="no answer"):
        waiters.outcome(w, 0.05)
    late = w
    late.finish(4, None)  # the record's answer came after all: nobody is misled
    w2 = waiters.get(10)
    assert w2 is not late
    _later(0.05, w2.finish, 0, TransientError("refused", Status.TIMEDOUT))
    with pytest.raises(TransientError, match="refused"):
        waiters.outcome(w2, 5)
    other: list[object] = []
    t = threading.Thread(target=lambda: other.append(waiters.get(1)))
    t.start()
    t.join()
    assert other[0] is not w2  # one waiter per thread

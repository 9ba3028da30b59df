"""The producer's buffer (``client._accumulator``), on its own."""

from __future__ import annotations

import threading
import time

import pytest

from logstrand.client._accumulator import RECORD_OVERHEAD, Accumulator, BufferFullError, cost


class _Nobody:
    def finish(self, lsn: int, error: BaseException | None) -> None:
        pass


_NOBODY = _Nobody()


def test_records_wait_per_log_in_order_and_one_wake_up_carries_them() -> None:
    wakes: list[int] = []
    acc = Accumulator(1 << 20, 1.0, lambda: wakes.append(1))
    acc.add(1, b"a", None, _NOBODY, cost(b"a", None))
    acc.add(2, b"b", b"k", _NOBODY, cost(b"b", b"k"))
    acc.add(1, b"c", None, _NOBODY, cost(b"c", None))
    assert wakes == [1]  # the first record woke the loop; the others ride along
    acc.add(2, b"e", None, _NOBODY, cost(b"e", None, b"hdr"), b"hdr")
    taken = acc.take()
    assert taken[1][0] == [b"a", b"c"]
    assert taken[1][3] is None  # no record of log 1 has headers
    assert taken[2][:2] == [[b"b", b"e"], [b"k", None]]
    assert taken[2][3] == [None, b"hdr"]  # headers: one per record once any has some
    acc.add(1, b"d", None, _NOBODY, cost(b"d", None))
    assert wakes == [1, 1]  # after a take, the next record wakes it again
    assert acc.pending() == 5
    assert acc.bytes == 5 + 1 + 3 + RECORD_OVERHEAD * 5


def test_a_full_buffer_blocks_then_fails_and_frees_when_records_finish() -> None:
    size = cost(b"x" * 100, None)
    acc = Accumulator(3 * size, 0.3, lambda: None)
    for _ in range(3):
        acc.add(1, b"x" * 100, None, _NOBODY, size)
    t0 = time.monotonic()
    with pytest.raises(BufferFullError, match="buffer_bytes_max"):
        acc.add(1, b"x" * 100, None, _NOBODY, size)
    assert 0.25 < time.monotonic() - t0 < 2.0
    assert acc.pending() == 3
    # A blocked producer goes on as soon as a record finishes.
    got: list[float] = []

    def producer() -> None:
        acc.add(1, b"x" * 100, None, _NOBODY, size)
        got.append(time.monotonic())

    acc.max_block_s = 5.0
    t = threading.Thread(target=producer)
    t.start()
    time.sleep(0.2)
    assert not got
    freed_at = time.monotonic()
    acc.finished(size)
    t.join(5)
    assert got
    assert got[0] - freed_at < 0.5
    assert acc.bytes <= 3 * size


def test_flush_waits_for_every_accepted_record() -> None:
    acc = Accumulator(1 << 20, 1.0, lambda: None)
    sizes = []
    for i in range(10):
        acc.add(1, b"r%d" % i, None, _NOBODY, cost(b"r%d" % i, None))
        sizes.append(cost(b"r%d" % i, None))
    assert acc.flush(0.1) is False
    threading.Timer(0.1, lambda: [acc.finished(s) for s in sizes]).start()
    assert acc.flush(5.0) is True
    assert (acc.pending(), acc.bytes) == (0, 0)

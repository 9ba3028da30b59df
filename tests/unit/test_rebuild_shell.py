"""The donor's wait for its release pointer (``Donor._released_to``),
on trio's virtual clock: it walks up to every copy it holds once those are
released, and after ``RELEASE_WAIT_S`` walks what is released."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from logstrand.storage._donor import RELEASE_WAIT_S, Donor


class _Committer:
    def __init__(self, release: int, last: int) -> None:
        self.release, self.last = release, last

    def release_of(self, log_id: int) -> int:
        return self.release

    def last_lsn(self, log_id: int) -> int:
        return self.last


def _donor(committer: _Committer) -> Donor:
    unused: Any = None  # the wait touches nothing but the committer
    return Donor(1, unused, committer, unused, unused, unused, unused)  # type: ignore[arg-type]


async def test_a_donor_waits_until_its_copies_are_released(
    autojump_clock: trio.testing.MockClock,
) -> None:
    committer = _Committer(release=10, last=20)
    donor = _donor(committer)

    async def release_later() -> None:
        await trio.sleep(3)
        committer.release = 20

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release_later)
        start = trio.current_time()
        assert await donor._released_to(7, 20) == 20  # not 10: the last copies count
        assert 3 <= trio.current_time() - start < 4


async def test_a_donor_walks_what_is_released_after_the_wait(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    donor = _donor(_Committer(release=10, last=20))
    start = trio.current_time()
    assert await donor._released_to(7, 20) == 10
    assert trio.current_time() - start == pytest.approx(RELEASE_WAIT_S, abs=0.2)
    assert "released only to 0xa" in caplog.text
    # Nothing to wait for: no time passes.
    start = trio.current_time()
    assert await _donor(_Committer(release=20, last=20))._released_to(7, 20) == 20
    assert trio.current_time() == start

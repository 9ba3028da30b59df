"""The token bucket behind ``--rebuild-rate``: a sender that waits as told
keeps to the rate within 10%, whatever the sizes it sends, and an idle
spell lets out one burst's worth at most."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand._rate import TokenBucket


def _send(bucket: TokenBucket, sizes: list[int], start: float = 0.0) -> tuple[int, float]:
    """A donor that sends ``sizes`` one after the other, each after the wait
    it is told (and 1 ms of its own work): bytes sent, and when it finished."""
    now, sent = start, 0
    for n in sizes:
        now += bucket.take(now, n)
        sent += n
        now += 0.001
    return sent, now


@pytest.mark.parametrize("rate", [50 * 1024, 1 << 20, 150 * 10**6])
def test_a_donor_keeps_to_the_rate_within_ten_percent(rate: int) -> None:
    rng = random.Random(rate)
    # Stored batches of 100 B to 4 MiB, as a donor streams them.
    sizes = [rng.choice([100, 10_000, 1 << 20, 4 << 20]) for _ in range(2_000)]
    bucket = TokenBucket(rate)
    sent, took = _send(bucket, sizes)
    assert took > 0
    assert abs(sent / took - rate) <= 0.1 * rate, (sent / took, rate)


@given(
    rate=st.integers(1_000, 10**9),
    sizes=st.lists(st.integers(1, 10**7), min_size=50, max_size=300),
)
def test_no_more_than_the_rate_and_one_burst_is_ever_let_out(rate: int, sizes: list[int]) -> None:
    bucket = TokenBucket(rate)
    now, sent = 100.0, 0  # long idle first: the bucket holds one burst
    for n in sizes:
        now += bucket.take(now, n)
        sent += n
        # By the time each is sent, at most a second's worth beyond the rate.
        assert sent <= rate * (now - 100.0) + rate + 1e-6 * sent


def test_an_idle_spell_gives_one_burst_not_its_length() -> None:
    bucket = TokenBucket(1000, burst_s=1.0)
    assert bucket.take(3600.0, 1000) == 0.0  # a burst's worth at once
    assert bucket.take(3600.0, 500) == pytest.approx(0.5)  # then the rate
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(0)

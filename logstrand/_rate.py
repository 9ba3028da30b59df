"""A byte rate with a bounded burst (a token bucket).  Pure: the caller
gives the time, so a test drives it with a fake clock."""

from __future__ import annotations


class TokenBucket:
    """``rate`` bytes a second; a sender idle for a while may go on at once
    with up to ``burst_s`` seconds' worth, no more (an idle hour does not
    let an hour's bytes out at once)."""

    def __init__(self, rate: float, *, burst_s: float = 1.0, now: float = 0.0) -> None:
        if rate <= 0 or burst_s <= 0:
            raise ValueError("a token bucket needs a positive rate and burst")
        self.rate = float(rate)
        self.burst = self.rate * burst_s
        self.tokens = 0.0
        self.at = now

    def take(self, now: float, n: int) -> float:
        """Take ``n`` bytes at time ``now``: the seconds to wait before
        sending them (0.0: at once).  The bytes are counted either way, so
        a caller that waits as told keeps to the rate."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

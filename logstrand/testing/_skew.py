"""Run ``logstrand`` with a wall clock that is off: the process's
``time.time``, ``time.time_ns`` and ``clock_gettime(CLOCK_REALTIME)`` read
the real clock plus an offset, as on a machine whose clock is wrong.  The
monotonic clocks are left alone: they are the machine's, shared by every
process on it, and a wrong wall clock does not move them either.

    python -m logstrand.testing._skew OFFSET_MS node --url ... --id 3

For tests only (``LocalCluster(clock_offsets={3: -864_000_000})``): nothing
in logstrand itself reads an offset.
"""

from __future__ import annotations

import runpy
import sys
import time


def skew(offset_ms: int) -> None:
    """Shift this process's wall clock by ``offset_ms`` from now on."""
    real_time, real_time_ns = time.time, time.time_ns
    real_gettime, real_gettime_ns = time.clock_gettime, time.clock_gettime_ns
    offset_s, offset_ns = offset_ms / 1000, offset_ms * 1_000_000

    def fake_time() -> float:
        return real_time() + offset_s

    def fake_time_ns() -> int:
        return real_time_ns() + offset_ns

    def fake_gettime(clock: int) -> float:
        real = real_gettime(clock)
        return real + offset_s if clock == time.CLOCK_REALTIME else real

    def fake_gettime_ns(clock: int) -> int:
        real = real_gettime_ns(clock)
        return real + offset_ns if clock == time.CLOCK_REALTIME else real

    time.time, time.time_ns = fake_time, fake_time_ns
    time.clock_gettime, time.clock_gettime_ns = fake_gettime, fake_gettime_ns


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m logstrand.testing._skew OFFSET_MS [logstrand arguments]")
    skew(int(sys.argv[1]))
    del sys.argv[1]
    runpy.run_module("logstrand", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

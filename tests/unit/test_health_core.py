"""A node's clock and what it says of itself (``storage._health_core``), on a
fake clock; the cluster's clock from the members' (``epochstore._members``)."""

from __future__ import annotations

from logstrand.epochstore import Member, describe_offset
from logstrand.epochstore._members import cluster_offsets
from logstrand.storage._health_core import HealthCore, HealthOptions, Said

DAY = 86_400_000


def test_the_cluster_clock_is_the_median_of_three_or_more() -> None:
    # One member 10 days behind cannot move the median.
    raw = {1: 120, 2: 80, 3: 100 - 10 * DAY}
    assert cluster_offsets(raw, anchored=True) == {1: 40, 2: 0, 3: -10 * DAY - 80 + 100}
    # Nor can a store clock that is itself off (every raw offset moves alike).
    shifted = {n: o + 3 * DAY for n, o in raw.items()}
    assert cluster_offsets(shifted, anchored=True) == cluster_offsets(raw, anchored=True)


def test_with_fewer_than_three_the_store_clock_decides_where_it_has_a_date() -> None:
    assert cluster_offsets({1: 50, 2: -10 * DAY}, anchored=True) == {1: 50, 2: -10 * DAY}
    # SQLite's clock is the machine's monotonic clock: no date, the median it is.
    assert cluster_offsets({1: 7_000}, anchored=False) == {1: 0}
    assert cluster_offsets({}, anchored=True) == {}


def test_describe_offset() -> None:
    assert describe_offset(-10 * DAY) == "10.0 d behind"
    assert describe_offset(3_200) == "3.2 s ahead"
    assert describe_offset(90 * 60_000) == "1.5 h ahead"


class Wall:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def core(**options: float) -> tuple[HealthCore, Wall]:
    wall = Wall()
    return HealthCore(1, HealthOptions(**options), wall), wall  # type: ignore[arg-type]


def test_a_clock_off_past_the_bound_takes_no_sequencers_and_is_corrected() -> None:
    health, wall = core()
    clock = health.clock
    assert clock.now_ms() == wall.ms
    assert not clock.trusted
    assert health.said(0.0) == Said(True)
    line = health.on_members({1: Member(1, -10 * DAY)})
    assert line is not None
    assert "10.0 d behind" in line
    assert clock.skewed
    assert not clock.trusted
    assert clock.now_ms() == wall.ms + 10 * DAY  # the cluster's time
    assert health.said(0.0) == Said(False, "clock 10.0 d behind")
    # Nothing new to say while it stays off.
    assert health.on_members({1: Member(1, -10 * DAY + 3)}) is None
    line = health.on_members({1: Member(1, 1_200)})
    assert line is not None
    assert "back within 5 s" in line
    assert clock.trusted
    assert health.said(0.0) == Said(True)
    assert clock.now_ms() == wall.ms - 1_200


def test_a_node_joining_a_running_cluster_holds_down() -> None:
    health, _ = core(hold_down_s=30.0)
    members = {
        1: Member(1, 0, sequencer=False, why="starting", since_ms=100_000),
        2: Member(2, 0, since_ms=40_000),  # a member for 60 s already
    }
    health.on_registered(members, now=10.0)
    said = health.said(10.0)
    assert not said.sequencer
    assert "joined a running cluster" in said.why
    assert not health.said(39.9).sequencer
    assert health.said(40.0) == Said(True)


def test_a_cluster_starting_together_has_no_hold_down() -> None:
    health, _ = core(hold_down_s=30.0)
    members = {
        1: Member(1, 0, since_ms=100_500),
        2: Member(2, 0, since_ms=100_000),
        # Up long, but taking no sequencers itself: not "running".
        3: Member(3, 0, sequencer=False, why="clock", since_ms=1_000),
    }
    health.on_registered(members, now=10.0)
    assert health.said(10.0) == Said(True)


def test_a_hold_down_of_zero_is_none() -> None:
    health, _ = core(hold_down_s=0.0)
    health.hold_down(5.0, "paused")
    assert health.said(5.0) == Said(True)

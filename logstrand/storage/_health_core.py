"""What a node says of itself: its clock, and whether it takes sequencers.
Pure: the node's ``Health`` shell feeds it the membership and the time.

Theory of operation
-------------------
*The clock.*  Time of day matters to a node in three places: the
timestamps its sequencers give records, the age of records for retention,
and compaction's lags.  A node's wall clock can be wrong, so each of them
reads ``NodeClock.now_ms()``: the wall clock less this node's distance from
the cluster's clock, which the membership measures (``epochstore._members``).
Past ``clock_skew_max_ms`` the node is *skewed*: it takes no sequencers and
applies no retention by time until its clock is back within the bound.  A
clock the membership has not measured yet is taken as it is, and retention
by time waits for a measure.

*Sequencers.*  Each sequencer move costs a new epoch and a recovery, so a
node that comes back takes its logs back only after a *hold-down*
(``hold_down_s`` of health): after it joined a cluster that was already
running (another member has taken sequencers for at least the hold-down),
after it lost its membership session, or after it heard from no other node
for longer than the failure detector waits (it was paused, or cut off).  A
cluster starting together has no hold-down: none of its members has been
running that long.  Nor has a node restarted on purpose: one that stopped
when told to (SIGTERM) and ended its sequencers' epochs on the way
(``SequencerHost.hand_off``) comes back without one, so its logs' next
sequencers, here, recover nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..epochstore import describe_offset

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..epochstore import Member


@attrs.frozen
class HealthOptions:
    #: A clock further than this from the cluster's takes no sequencers and
    #: applies no retention by time.
    clock_skew_max_ms: int = 5_000
    #: A node that comes back takes sequencers after this long in health.
    hold_down_s: float = 30.0


class NodeClock:
    """This node's clock: the wall clock corrected by its measured distance
    from the cluster's (see the module docstring)."""

    def __init__(self, wall_ms: Callable[[], int], skew_max_ms: int) -> None:
        self._wall_ms = wall_ms
        self.skew_max_ms = skew_max_ms
        #: This node's wall clock minus the cluster's (ms); None: not measured.
        self.offset_ms: int | None = None

    def now_ms(self) -> int:
        return self._wall_ms() - (self.offset_ms or 0)

    @property
    def skewed(self) -> bool:
        return self.offset_ms is not None and abs(self.offset_ms) > self.skew_max_ms

    @property
    def trusted(self) -> bool:
        """Measured and within the bound: retention by time may run."""
        return self.offset_ms is not None and not self.skewed


def _versus(offset_ms: int) -> str:
    """``10.0 d behind the cluster's``, ``3.2 s ahead of the cluster's``."""
    return describe_offset(offset_ms).replace(" ahead", " ahead of") + " the cluster's"


@attrs.frozen
class Said:
    """What the node says of itself in the membership."""

    sequencer: bool
    why: str = ""


class HealthCore:
    def __init__(self, node_id: int, options: HealthOptions, wall_ms: Callable[[], int]) -> None:
        self.node_id = node_id
        self.options = options
        self.clock = NodeClock(wall_ms, options.clock_skew_max_ms)
        #: Told to stop: it hands its sequencers off (``Node.hand_off``).
        self.stopping = False
        #: The end of the hold-down (monotonic), and why it started.
        self._hold_until: float | None = None
        self._hold_why = ""

    # -- input --------------------------------------------------------------------

    def on_members(self, members: Mapping[int, Member]) -> str | None:
        """The membership as read now.  Returns a line to log when this
        node's clock crossed the bound (either way)."""
        me = members.get(self.node_id)
        if me is None or me.clock_offset_ms is None:
            return None
        clock = self.clock
        was = clock.skewed
        clock.offset_ms = me.clock_offset_ms
        if clock.skewed == was:
            return None
        if clock.skewed:
            return (
                f"this node's clock is {_versus(clock.offset_ms)} (more than "
                f"{clock.skew_max_ms / 1000:g} s): it takes no sequencers and applies no "
                "retention by time until it is back; fix its time source (NTP)"
            )
        return (
            f"this node's clock is back within {clock.skew_max_ms / 1000:g} s of the cluster's "
            f"({describe_offset(me.clock_offset_ms)})"
        )

    def on_registered(
        self, members: Mapping[int, Member], now: float, *, handed_off: bool = False
    ) -> None:
        """Just registered: into a running cluster, the hold-down applies,
        unless the node last stopped when told to and handed its sequencers
        off (``handed_off``): a restart, not a node that failed."""
        me = members.get(self.node_id)
        if me is None or handed_off:
            return
        hold_ms = self.options.hold_down_s * 1000
        running = [
            m
            for n, m in members.items()
            if n != self.node_id and m.sequencer and me.since_ms - m.since_ms >= hold_ms
        ]
        if running:
            self.hold_down(now, "joined a running cluster")

    def hold_down(self, now: float, why: str) -> None:
        """Take no sequencers for ``hold_down_s`` from now."""
        if self.options.hold_down_s > 0:
            self._hold_until = now + self.options.hold_down_s
            self._hold_why = why

    # -- output -------------------------------------------------------------------

    def said(self, now: float) -> Said:
        """What the node says of itself now."""
        clock = self.clock
        if self.stopping:
            return Said(False, "stopping: its sequencers hand their logs off")
        if clock.skewed:
            assert clock.offset_ms is not None
            return Said(False, f"clock {describe_offset(clock.offset_ms)}")
        if self._hold_until is not None:
            if now < self._hold_until:
                hold = self.options.hold_down_s
                return Said(False, f"hold-down of {hold:g} s: {self._hold_why}")
            self._hold_until = None
        return Said(True)

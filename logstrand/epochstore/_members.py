"""What the membership says of each live node: its clock, and whether it
takes sequencers.  Pure: both stores build these, everyone reads them.

Clocks.  Every member's heartbeat carries its wall clock, measured against
the store's own clock at the same moment: ZooKeeper's (the server stamps
each write with its time: ``mtime``), or on SQLite the machine's monotonic
clock, which every process on the machine shares and which a wrong wall
clock does not move.  That gives each member a *raw offset*: its wall clock
minus the store's clock.  The cluster's clock is the median of the members'
clocks (with three or more, one wrong clock, or a wrong ZooKeeper clock,
cannot move it); with fewer, ZooKeeper's own clock where there is one.  A
member's ``clock_offset_ms`` is its distance from the cluster's clock.

Sequencers.  A member says itself whether it takes sequencers
(``sequencer``) and why not (``why``): its clock is off by more than the
bound, or it is in its hold-down after coming back.  Routing leaves such
members out while any other can take the log (``rpc.ClusterView``).

Sessions.  A node's presence in the membership is a ``MemberSession``
(each store's own kind), and a reader of it a ``Watch``.
"""

from __future__ import annotations

import abc
import statistics
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


@attrs.frozen
class Member:
    """One live member, as the store reports it."""

    node_id: int
    #: This member's wall clock minus the cluster's, in ms (None: not measured).
    clock_offset_ms: int | None = None
    #: It takes sequencers now (it says so itself).
    sequencer: bool = True
    #: Why it does not, when it does not.
    why: str = ""
    #: When its session started, in ms on the store's clock (comparable
    #: between members of one store, not with any wall clock).
    since_ms: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "node_id": self.node_id,
            "clock_offset_ms": self.clock_offset_ms,
            "sequencer": self.sequencer,
            "why": self.why,
        }


Members = dict[int, Member]

#: With at least this many clocks, the median is the cluster's clock.
MEDIAN_MIN = 3


def cluster_offsets(raw: Mapping[int, int], *, anchored: bool) -> dict[int, int]:
    """Each member's distance (ms) from the cluster's clock, from raw offsets
    against the store's clock.  ``anchored``: the store's clock is a wall
    clock (ZooKeeper's), trusted when there are too few members for a median."""
    if not raw:
        return {}
    if anchored and len(raw) < MEDIAN_MIN:
        reference = 0
    else:
        reference = int(statistics.median_low(sorted(raw.values())))
    return {n: off - reference for n, off in raw.items()}


def describe_offset(offset_ms: int) -> str:
    """``3.2 s ahead``, ``10.0 d behind``: for logs and ``status``."""
    size = abs(offset_ms) / 1000
    side = "ahead" if offset_ms > 0 else "behind"
    for unit, seconds in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if size >= seconds:
            return f"{size / seconds:.1f} {unit} {side}"
    return f"{size:.1f} s {side}"


def signature(members: Mapping[int, Member]) -> tuple[tuple[int, bool, str, int | None], ...]:
    """What a watch compares: who, what each says, and clocks to the second
    (heartbeats move them by a millisecond or two every time)."""
    return tuple(
        (
            m.node_id,
            m.sequencer,
            m.why,
            None if m.clock_offset_ms is None else round(m.clock_offset_ms / 1000),
        )
        for _, m in sorted(members.items())
    )


class MemberSession(abc.ABC):
    """A node's presence in the membership; it ends with ``close()`` or with the process.

    Its heartbeats carry the node's wall clock (``_members``), and what the
    node says of itself: whether it takes sequencers, and why not.
    """

    node_id: int
    #: How many times the session was lost (the process stopped past the
    #: lease, a ZooKeeper session expired) and taken again: the node was
    #: out of the membership meanwhile, and others may have taken its logs.
    returns: int = 0

    @abc.abstractmethod
    def publish(self, *, sequencer: bool, why: str = "") -> None:
        """Say whether this node takes sequencers now (every reader of the
        membership sees it)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> MemberSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Watch:
    """A running membership watch; ``cancel()`` stops it."""

    def __init__(self, cancel: Callable[[], None]) -> None:
        self._cancel = cancel

    def cancel(self) -> None:
        self._cancel()

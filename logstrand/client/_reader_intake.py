"""What a reader does with one ``ReadRecords`` from a node: the rules between
the wire and ``ReaderCore``.  Pure (no trio): the client's read stream and the
simulation's reader both hand every message through ``absorb``.

- A status other than OK ends that node's stream: ACCESS denies the whole
  read (one ACCESS gap, nothing of the log delivered), NOTFOUND means the log
  does not exist, OVERLOADED that the node refused to open one more stream on
  the connection (its ``--read-streams-per-connection``: an error for the
  caller, not a reason to wait), anything else makes the node unreachable
  until the shell reconnects.
- A batch whose body fails its checksum changed on its way (or on the node's
  disk): it is never delivered, and its window counts as copies that node
  found unreadable, so another holder is asked for them at once.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING

from ..errors import Status
from ..types import GapType
from ._reader_core import GapItem
from ._views import BatchView

if TYPE_CHECKING:
    from ..wire import ReadRecords
    from ._reader_core import ReaderCore

_log = logging.getLogger("logstrand.client")


class Verdict(enum.Enum):
    TAKEN = "taken"  # the core has it
    DENIED = "denied"  # no permission to read the log
    NOT_FOUND = "not found"  # the log does not exist
    REFUSED = "refused"  # the node has as many streams from us as it takes
    RECONNECT = "reconnect"  # the node's stream ended: reconnect later


def absorb(core: ReaderCore, node_id: int, msg: ReadRecords, now: float) -> Verdict:
    if msg.status != Status.OK:
        if msg.status == Status.ACCESS:
            return Verdict.DENIED
        if msg.status == Status.NOTFOUND:
            return Verdict.NOT_FOUND
        if msg.status == Status.OVERLOADED:
            return Verdict.REFUSED
        core.on_unreachable(node_id, now)
        return Verdict.RECONNECT
    u = msg.unreadable
    unreadable = [(u[i], u[i + 1]) for i in range(0, len(u), 2)]
    w = msg.windows
    views = []
    for i, pb in enumerate(msg.batches):
        if pb.body_ok():
            views.append(BatchView(pb, w[2 * i], w[2 * i + 1]))
            continue
        _log.warning(
            "log %d: node %d sent a batch at %#x that fails its checksum",
            core.log_id,
            node_id,
            pb.first_lsn,
        )
        unreadable.append((w[2 * i], w[2 * i + 1]))
    core.on_records(
        node_id,
        msg.generation,
        msg.next_lsn,
        msg.trim_point,
        views,
        now,
        msg.clean_point,
        unreadable,
        msg.local_floor,
    )
    return Verdict.TAKEN


def access_gap(core: ReaderCore | None, start: int, until: int) -> GapItem:
    """The one ACCESS gap of a denied read: from where delivery stands to the
    end of the range asked for."""
    lo = core.next_lsn if core is not None else start
    hi = core.until if core is not None else until
    return GapItem(GapType.ACCESS, lo, max(lo, hi))

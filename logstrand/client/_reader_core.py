"""The reader of one log: merges the nodes' streams into LSN order.  Pure: no trio.

Theory of operation
-------------------
Every node of the log's nodeset streams the copies it holds, in LSN order,
and tells its *position*: it has sent everything it will send below it.  The
*frontier* is the lowest position among the nodes that count (not known to
be down); every record below the frontier has already arrived, so records
below it are delivered in LSN order, duplicates dropped.

With single-copy delivery (SCD, the default) each record comes from one node
only: the first node of its copyset that the reader does not report down.
LSNs below the frontier that no node sent are *suspect*: they may not exist
(an epoch ended) or their copies may be gone.  The reader then rewinds with
every node sending every copy (all-send-all, ASA) and decides only when an
f-majority of the nodeset (|nodeset| − R + 1 nodes) has moved past an LSN
without sending it; that set meets every possible copyset, so no copy exists
anywhere.  Such a range is BRIDGE when it runs to the end of its epoch (the
next record is in a later epoch), DATALOSS otherwise.  Once past, the reader
goes back to SCD.  While too few nodes answer to decide, it waits and reports
itself unhealthy: it never calls unreachable data lost.

A node that goes away, or whose position stops moving while it holds the
frontier back (``stall_s``), is listed as down and the streams are rewound, so
that the next holder of each of its records sends them.

Stored records flagged HOLE (plugged by recovery) become HOLE gaps, BRIDGE
records a BRIDGE gap to the end of their epoch; LSNs at or below the trim
point a TRIM gap.  At or below a node's local floor (a tiered log's copies
it dropped) the shell reads the object store (``take_tiered``).

A node tells which of its copies it cannot read (a checksum failed) and
moves past them; to the reader they are copies that node did not send, so
another holder sends them (the rewind to all-send-all is immediate).  When
the f-majority decision finds an LSN that no node sent and some node
reported unreadable, the gap is CHECKSUM_FAIL, over exactly the LSNs
reported, instead of DATALOSS.

Rebuilding (``set_authority``): a node rebuilt or drained (AUTHORITATIVE_EMPTY)
is not needed for an f-majority; a node being rebuilt counts for nothing when
it says "not here", so a wiped node never makes the reader report DATALOSS.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from ..records import BRIDGE, EPOCH_MAX, HOLE, WRITTEN_BY_RECOVERY
from ..types import LSN_MAX, GapType, compose_lsn, lsn_epoch, next_epoch_lsn
from ._reader_parts import (
    Action,
    GapItem,
    GrantCredit,
    Item,
    NodeStream,
    StartStream,
    StopStream,
    copy_precedence,
    grants,
)
from ._views import RecordRun

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._views import BatchView

__all__ = ["Action", "GapItem", "GrantCredit", "Item", "RecordRun", "StartStream", "StopStream"]

_PLAIN = (0, 0)
#: Unreadable ranges remembered per node (the oldest go first).
UNREADABLE_MAX = 1024


class ReaderCore:
    """Reads ``log_id`` from ``start`` to ``until`` (inclusive) off ``nodeset``."""

    def __init__(
        self,
        log_id: int,
        start: int,
        until: int,
        nodeset: tuple[int, ...],
        replication: int,
        *,
        scd: bool = True,
        credit: int = 4096,
        credit_max: int = 65_536,
        window_bytes: int = 8 * 1024 * 1024,
        stall_s: float = 2.0,
        now: float = 0.0,
        show_compacted: bool = False,
        known_epoch: int = EPOCH_MAX,
    ) -> None:
        assert nodeset
        assert 1 <= replication <= len(nodeset)
        self.log_id = log_id
        # Epochs start at 1 and ESN 0 is never used: nothing exists below e1n1.
        self.next_lsn = max(start, compose_lsn(1, 1))
        self.until = until
        self.nodeset = nodeset
        self.replication = replication
        self.f_majority = len(nodeset) - replication + 1
        self.empty = self.untrusted = frozenset[int]()  # see ``set_authority``
        self.show_compacted = show_compacted
        #: LSNs (first, last) that the shell reads from the object store
        #: before anything after them (``take_tiered``).
        self.tiered: tuple[int, int] | None = None
        self.scd_default = scd
        self.scd = scd
        # Each node's window (records it may send ahead of delivery) starts at
        # ``credit`` and grows up to ``credit_max`` while records are small: at
        # most ``window_bytes`` of payload in flight per node.  A node sending a
        # long run of its own copies is held back by the window alone, so a
        # small one halves backfill speed (measured: bench/read.py).
        self.credit = credit
        self.credit_max = max(credit, credit_max)
        self.window_bytes = window_bytes
        self._seen_records = 0
        self._seen_bytes = 0
        self.stall_s = stall_s
        self.generation = 0
        self.known_down: set[int] = set()
        self.unreachable: set[int] = set()
        self.nodes = {n: NodeStream(moved_at=now) for n in nodeset}
        self.items: list[Item] = []
        self.actions: list[Action] = []
        self.healthy = True
        self.rewinds = 0
        #: The latest epoch the placement (``nodeset``) covers; past it, the
        #: shell must read the placement again (``set_placement``) before a
        #: missing LSN is called lost: a later epoch may have other nodes.
        self.known_epoch = known_epoch
        self.wants_placement = False
        #: Since when a node is ahead of the frontier (stall detection).
        self._ahead_since: float | None = None
        self._rewind(now)

    @property
    def done(self) -> bool:
        return self.next_lsn > self.until

    # -- input -----------------------------------------------------------------

    def on_records(
        self,
        node_id: int,
        generation: int,
        next_lsn: int,
        trim: int,
        batches: Sequence[BatchView],
        now: float,
        clean: int = 0,
        unreadable: Sequence[tuple[int, int]] = (),
        floor: int = 0,
    ) -> None:
        st = self.nodes.get(node_id)
        if st is None or generation != self.generation:
            return  # a message from before the last rewind
        if unreadable:
            st.unreadable.extend(unreadable)
            # Bounded: ranges the reader has passed are of no more use.
            st.unreadable = [r for r in st.unreadable if r[1] >= self.next_lsn][-UNREADABLE_MAX:]
        for batch in batches:
            if not batch.lsns:
                continue
            st.queue.append((batch, 0))
            if self._seen_records < 1 << 20:  # the record size, from a sample
                self._seen_records += len(batch.lsns)
                self._seen_bytes += batch.payload_bytes
        if next_lsn > st.pos:
            st.pos = next_lsn
            st.moved_at = now
            if lsn_epoch(next_lsn - 1) > self.known_epoch:
                self.wants_placement = True  # an epoch the placement did not cover
        st.trim = max(st.trim, trim)
        st.clean = max(st.clean, clean)
        st.floor = max(st.floor, floor)

    def set_authority(self, empty: frozenset[int], untrusted: frozenset[int]) -> None:
        """Rebuilding's status of the nodes: ``empty`` (AUTHORITATIVE_EMPTY) are
        not needed for an f-majority; a "not here" from ``untrusted``
        (REBUILDING, UNDERREPLICATION) counts for nothing: the reader waits."""
        self.empty, self.untrusted = empty & set(self.nodeset), untrusted & set(self.nodeset)
        self.f_majority = max(1, len(set(self.nodeset) - self.empty) - self.replication + 1)

    def set_placement(
        self, nodeset: tuple[int, ...], replication: int, known_epoch: int, now: float
    ) -> None:
        """The log's placement, read again: nodes that joined its nodesets are
        read from, nodes no longer in them stop (``StopStream``), and every
        stream starts again where delivery stands."""
        self.known_epoch = max(self.known_epoch, known_epoch)
        self.wants_placement = False
        if nodeset == self.nodeset and replication == self.replication:
            return
        self.actions.extend(StopStream(n) for n in self.nodeset if n not in nodeset)
        self.nodeset, self.replication = nodeset, min(replication, len(nodeset))
        self.nodes = {n: self.nodes.get(n) or NodeStream(moved_at=now) for n in nodeset}
        self.known_down &= set(nodeset)
        self.unreachable &= set(nodeset)
        self.set_authority(self.empty, self.untrusted)
        self._rewind(now)

    def on_unreachable(self, node_id: int, now: float) -> None:
        if node_id not in self.nodes or node_id in self.unreachable:
            return
        self.unreachable.add(node_id)
        if node_id not in self.known_down:
            self.known_down.add(node_id)
            self._rewind(now)

    def on_reachable(self, node_id: int, now: float) -> None:
        if node_id in self.unreachable:
            self.unreachable.discard(node_id)
            self.known_down.discard(node_id)
            self._rewind(now)

    # -- output ----------------------------------------------------------------

    def take_tiered(self) -> tuple[int, int] | None:
        """The LSNs to read from the object store now (None: none)."""
        span, self.tiered = self.tiered, None
        return span

    def take(self) -> tuple[list[Item], list[Action]]:
        items, self.items = self.items, []
        actions, self.actions = self.actions, []
        return items, actions

    def poll(self, now: float) -> None:
        """Deliver what can be delivered; start rewinds and grant credit as needed."""
        for _ in range(10_000):  # bounded: each pass delivers, decides or stops
            if self.done or not self._step(now):
                break
        self._grant()

    # -- internals ---------------------------------------------------------------

    def _counting(self) -> list[int]:
        """Nodes whose position bounds delivery now."""
        return [n for n in self.nodeset if n not in self.known_down]

    def _rewind(self, now: float) -> None:
        self._ahead_since = None
        self.generation += 1
        self.rewinds += 1
        for st in self.nodes.values():
            st.pos = 0
            st.queue.clear()
            st.consumed = 0
            st.window = self.credit
            st.moved_at = now
            st.unreadable.clear()
        down = tuple(sorted(self.known_down))
        for n in self.nodeset:
            if n in self.unreachable:
                continue
            self.actions.append(
                StartStream(
                    n, self.generation, self.next_lsn, self.until, self.credit, self.scd, down
                )
            )

    def _drop_below(self, st: NodeStream, lsn: int) -> None:
        while st.queue:
            batch, off = st.queue[0]
            lsns = batch.lsns
            if lsns[-1] < lsn:
                st.consumed += len(lsns) - off
                st.queue.popleft()
                continue
            if lsns[off] < lsn:
                new = bisect.bisect_left(lsns, lsn, off)
                st.consumed += new - off
                st.queue[0] = (batch, new)
            return

    def _step(self, now: float) -> bool:
        if self.tiered is not None:
            return False  # the shell reads those first
        nodes = self.nodes
        trim = max(st.trim for st in nodes.values())
        if self.next_lsn <= trim:
            hi = min(trim, self.until)
            self.items.append(GapItem(GapType.TRIM, self.next_lsn, hi))
            self.next_lsn = hi + 1
            return True
        floor = max(st.floor for st in nodes.values())
        if self.next_lsn <= floor:
            # One node's floor is enough: a floor never passes the tiered
            # point, and the node's position says nothing of what it dropped.
            hi = min(floor, self.until)
            self.tiered = (self.next_lsn, hi)
            self.next_lsn = hi + 1
            return False
        head_node, head, best = None, LSN_MAX + 1, _PLAIN
        for n, st in nodes.items():
            self._drop_below(st, self.next_lsn)
            if st.queue:
                batch, off = st.queue[0]
                lsn = batch.lsns[off]
                if lsn < head:
                    head_node, head, best = n, lsn, copy_precedence(batch, off)
                elif lsn == head and (p := copy_precedence(batch, off)) > best:
                    # Differing copies (one left by a sequencer that died, one
                    # by recovery): the highest precedence wins, for every reader.
                    head_node, best = n, p
        counting = self._counting()
        frontier = min((nodes[n].pos for n in counting), default=0)
        if head_node is not None and head == self.next_lsn and head < frontier:
            self._deliver(head_node, frontier, now)
            self.healthy = True
            return True
        missing_hi = min(head, frontier) - 1
        if missing_hi < self.next_lsn:
            self._check_stall(now, frontier)
            return False
        clean = max(st.clean for st in nodes.values())
        if self.next_lsn <= clean:
            # Below a compacted log's clean point, what no node has was
            # removed by compaction: reading goes on from the next record.
            hi = min(missing_hi, clean, self.until)
            if self.show_compacted:
                self.items.append(GapItem(GapType.COMPACTED, self.next_lsn, hi))
            self.next_lsn = hi + 1
            return True
        # LSNs [next_lsn, missing_hi] came from no node although every counting
        # node has passed them.
        if lsn_epoch(missing_hi) > self.known_epoch:
            self.wants_placement = True  # nodes this reader does not know may have them
            return False
        if self.scd:
            self.scd = False
            self._rewind(now)
            return False
        return self._decide_gap(head, now)

    def _deliver(self, node_id: int, frontier: int, now: float) -> None:
        st = self.nodes[node_id]
        batch, off = st.queue[0]
        lsns = batch.lsns
        # Every record below the frontier has arrived; another node's copies
        # of the same LSNs are duplicates, dropped on the next step.
        end = bisect.bisect_left(lsns, min(frontier, self.until + 1), off)
        # Only the consecutive prefix: a jump in LSNs may hide a gap.
        if lsns[end - 1] - lsns[off] != end - 1 - off:
            lo, hi = off, end - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if lsns[mid] - lsns[off] == mid - off:
                    lo = mid
                else:
                    hi = mid - 1
            end = lo + 1
        end = self._cut_before_better_copies(node_id, batch, off, end)
        after = self._emit(batch, off, end)
        st.consumed += end - off
        if end >= len(lsns):
            st.queue.popleft()
        else:
            st.queue[0] = (batch, end)
        self.next_lsn = max(lsns[end - 1] + 1, after)
        if not self.scd and self.scd_default:
            # Past the suspect range: back to single-copy delivery.
            self.scd = True
            self._rewind(now)

    def _cut_before_better_copies(self, node_id: int, batch: BatchView, off: int, end: int) -> int:
        """End a run of consecutive records before an LSN another node has a
        better copy of (only recovery copies can be better)."""
        first, hi = batch.lsns[off], batch.lsns[end - 1]
        for n, st in self.nodes.items():
            if n == node_id:
                continue
            for other, o in st.queue:
                olsns = other.lsns
                if olsns[o] > hi:
                    break
                if not other.packed.flag_bits & WRITTEN_BY_RECOVERY:
                    continue
                for i in range(o, len(olsns)):
                    x = olsns[i]
                    if x > hi:
                        break
                    if other.flags[i] & WRITTEN_BY_RECOVERY and x > first:
                        mine = copy_precedence(batch, off + (x - first))
                        if copy_precedence(other, i) > mine:
                            hi = x - 1
                            break
        return off + (hi - first) + 1

    def _emit(self, batch: BatchView, off: int, end: int) -> int:
        """Deliver records [off, end) of a batch; returns the LSN reading goes on from."""
        after = 0
        if not batch.packed.flag_bits & (HOLE | BRIDGE):
            self.items.append(RecordRun(batch, off, end))
            return after
        run = off
        for i in range(off, end):
            lsn, fl = batch.lsns[i], batch.flags[i]
            if not fl & (HOLE | BRIDGE):
                continue
            if run < i:
                self.items.append(RecordRun(batch, run, i))
            run = i + 1
            if fl & BRIDGE:
                epoch_end = min(next_epoch_lsn(lsn), self.until)
                self.items.append(GapItem(GapType.BRIDGE, lsn, epoch_end))
                after = epoch_end + 1
                # Whatever follows a bridge in its epoch is a copy left by a
                # sequencer that died (recovery decided the epoch ends here).
                return after
            self.items.append(GapItem(GapType.HOLE, lsn, lsn))
        if run < end:
            self.items.append(RecordRun(batch, run, end))
        return after

    def _decide_gap(self, head: int, now: float) -> bool:
        """ASA mode: is [next_lsn, ...] empty on an f-majority?"""
        x = self.next_lsn
        skip = self.unreachable | self.empty | self.untrusted
        positions = sorted((st.pos for n, st in self.nodes.items() if n not in skip), reverse=True)
        if len(positions) < self.f_majority or positions[self.f_majority - 1] <= x:
            self.healthy = False  # not enough nodes answer to decide: wait
            return False
        self.healthy = True
        hi = min(head, positions[self.f_majority - 1]) - 1
        hi = min(hi, self.until)
        bad = [r for st in self.nodes.values() for r in st.unreadable if r[1] >= x]
        covering = [last for first, last in bad if first <= x]
        if covering:
            # Copies exist but every one that was sent or reported fails its check.
            end = max(covering)
            for first, last in sorted(bad):  # adjoining ranges make one gap
                if first <= end + 1:
                    end = max(end, last)
            hi = min(hi, end)
            self.items.append(GapItem(GapType.CHECKSUM_FAIL, x, hi))
            self.next_lsn = hi + 1
            return True
        hi = min([hi] + [first - 1 for first, _ in bad])
        if lsn_epoch(hi) > lsn_epoch(x):
            # The rest of x's epoch is empty everywhere: the epoch ended.
            hi = min(next_epoch_lsn(x), hi)
            gap = GapType.BRIDGE
        else:
            gap = GapType.DATALOSS
        self.items.append(GapItem(gap, x, hi))
        self.next_lsn = hi + 1
        return True

    def _check_stall(self, now: float, frontier: int) -> None:
        """A counting node that holds the frontier back and does not move,
        for ``stall_s`` since another node got ahead of it, is slow.  (Not
        since it last moved: on a log that was quiet for a while, every node
        stood still, and the first record makes one node ahead for a moment.)"""
        if frontier > self.until:
            return
        ahead = max((st.pos for st in self.nodes.values()), default=0)
        if ahead <= frontier:
            self._ahead_since = None
            return  # everyone is at the frontier: we are at the tail
        if self._ahead_since is None:
            self._ahead_since = now
        since = self._ahead_since
        counting = self._counting()
        for n in counting:
            st = self.nodes[n]
            if st.pos == frontier and now - max(st.moved_at, since) >= self.stall_s:
                if len(counting) > 1:
                    self.known_down.add(n)
                else:
                    # The last node that counts: the ones listed down for being
                    # slow count again, or there would be no frontier at all.
                    self.known_down = set(self.unreachable)
                self._rewind(now)
                return

    def _grant(self) -> None:
        target = self.credit
        if self._seen_records:
            size = max(1, self._seen_bytes // self._seen_records)
            target = max(self.credit, min(self.credit_max, self.window_bytes // size))
        self.actions += grants(self.nodes, self.generation, target)

    def next_deadline(self, now: float) -> float:
        """When to poll again even without input: while a node that counts
        holds the frontier back and others are ahead (stall detection);
        otherwise only input changes anything (``math.inf``)."""
        if self.done:
            return math.inf
        counting = self._counting()
        frontier = min((self.nodes[n].pos for n in counting), default=0)
        ahead = max((st.pos for st in self.nodes.values()), default=0)
        if frontier > self.until or ahead <= frontier:
            return math.inf
        return now + self.stall_s / 2

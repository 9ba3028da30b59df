"""The reader core against simulated storage nodes (no sockets, no trio)."""

from __future__ import annotations

import random

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import PackedBatch, make_batch
from logstrand.client._reader_core import (
    GapItem,
    GrantCredit,
    ReaderCore,
    RecordRun,
    StartStream,
    StopStream,
)
from logstrand.client._views import BatchView
from logstrand.types import LSN_MAX, GapType

E1 = 1 << 32
E2 = 2 << 32
HOLE, BRIDGE = 1, 2


def views(batch: PackedBatch | None, wave: int = 0) -> list[BatchView]:
    """What a node's stored batches become at a reader: one packed batch."""
    if batch is None:
        return []
    return [BatchView(batch.reheader(copyset=batch.copyset, wave=wave), 0, 2**64 - 1)]


def batch_of(
    lsns: tuple[int, ...], payloads: tuple[bytes | None, ...], flags: tuple[int, ...]
) -> PackedBatch | None:
    if not lsns:
        return None
    return make_batch(lsns, payloads, timestamps_ms=100, flags=flags)


def lsn(epoch: int, esn: int) -> int:
    return (epoch << 32) | esn


@attrs.define
class FakeNode:
    """A node's read side: its copies, its release pointer, one stream."""

    node_id: int
    records: dict[int, tuple[tuple[int, ...], bytes, int]] = attrs.Factory(dict)
    release: int = LSN_MAX - 1
    trim: int = 0
    #: A tiered log's local floor: the copies at or below it are gone from here.
    floor: int = 0
    stream: StartStream | None = None
    pos: int = 0
    credit: int = 0
    reachable: bool = True
    #: LSNs whose copies here fail their checksum: reported, never sent
    corrupt: set[int] = attrs.Factory(set)

    def pump(self, core: ReaderCore, now: float, batch_max: int = 7) -> bool:
        """Send one message if there is anything to say.  True if it did."""
        s = self.stream
        if s is None or not self.reachable:
            return False
        limit = min(s.until_lsn, self.release)
        if self.pos > limit:
            return False
        out, scanned_to, bad = [], limit, []
        low = max(self.trim, self.floor)
        for n in sorted(x for x in self.records if self.pos <= x <= limit and x > low):
            if len(out) >= min(self.credit, batch_max):
                scanned_to = n - 1
                break
            if n in self.corrupt:
                bad.append((n, n))
                continue
            copyset, payload, flags = self.records[n]
            first = next((c for c in copyset if c not in s.known_down), None)
            if not s.scd or first == self.node_id or first is None:
                out.append((n, payload, flags))
        if not out and self.credit <= 0 and scanned_to < limit:
            return False
        batch = batch_of(
            tuple(n for n, _, _ in out),
            tuple(p for _, p, _ in out),
            tuple(f for _, _, f in out),
        )
        self.credit -= len(out)
        self.pos = scanned_to + 1
        core.on_records(
            self.node_id, s.generation, self.pos, self.trim, views(batch), now, 0, bad, self.floor
        )
        return True


def run(
    core: ReaderCore,
    nodes: dict[int, FakeNode],
    rng: random.Random,
    steps: int = 5000,
    clock: list[float] | None = None,
) -> list:
    """Drive the core until done; ``clock`` gets the fake time it took."""
    items: list = []
    now = 0.0
    for _ in range(steps):
        core.poll(now)
        got, actions = core.take()
        items += got
        span = core.take_tiered()
        if span is not None:  # the shell reads these from the object store
            items.append(("tiered", *span))
        for a in actions:
            node = nodes[a.node_id]
            if isinstance(a, StartStream):
                node.stream, node.pos, node.credit = a, a.start_lsn, a.credit
            elif (
                isinstance(a, GrantCredit)
                and node.stream
                and node.stream.generation == a.generation
            ):
                node.credit += a.records
        if core.done:
            break
        order = list(nodes.values())
        rng.shuffle(order)
        if not any(n.pump(core, now) for n in order):
            now += 1.0  # nothing to say: time passes (stall detection)
    if clock is not None:
        clock.append(now)
    return items


def records_of(items: list) -> list[tuple[int, bytes]]:
    out = []
    for it in items:
        if isinstance(it, RecordRun):
            out += list(zip(it.lsns, it.payloads, strict=True))
    return out


def gaps_of(items: list) -> list[tuple[GapType, int, int]]:
    return [(g.type, g.lo, g.hi) for g in items if isinstance(g, GapItem)]


def cluster(copies: dict[int, tuple[int, ...]], n: int = 3) -> dict[int, FakeNode]:
    nodes = {i: FakeNode(i) for i in range(1, n + 1)}
    for x, copyset in copies.items():
        for c in copyset:
            nodes[c].records[x] = (copyset, b"p%d" % x, 0)
    return nodes


def test_every_record_once_in_order_with_single_copy_delivery() -> None:
    rng = random.Random(1)
    copies = {lsn(1, i): tuple(rng.sample([1, 2, 3], 2)) for i in range(1, 201)}
    nodes = cluster(copies)
    core = ReaderCore(7, 1, lsn(1, 200), (1, 2, 3), 2, credit=16)
    items = run(core, nodes, rng)
    assert records_of(items) == [(x, b"p%d" % x) for x in sorted(copies)]
    assert gaps_of(items) == []
    assert core.done


def test_an_epoch_change_is_one_bridge_gap() -> None:
    copies = {lsn(1, i): (1, 2) for i in range(1, 11)} | {lsn(2, i): (2, 3) for i in range(1, 6)}
    core = ReaderCore(7, 1, lsn(2, 5), (1, 2, 3), 2)
    items = run(core, cluster(copies), random.Random(2))
    assert [x for x, _ in records_of(items)] == sorted(copies)
    assert gaps_of(items) == [(GapType.BRIDGE, lsn(1, 11), E2)]


def test_unreachable_node_changes_nothing_delivered() -> None:
    rng = random.Random(3)
    copies = {lsn(1, i): tuple(rng.sample([1, 2, 3], 2)) for i in range(1, 101)}
    nodes = cluster(copies)
    core = ReaderCore(7, 1, lsn(1, 100), (1, 2, 3), 2, credit=8)
    nodes[2].reachable = False
    core.on_unreachable(2, 0.0)
    items = run(core, nodes, rng)
    assert [x for x, _ in records_of(items)] == sorted(copies)
    assert gaps_of(items) == []


def test_copies_gone_everywhere_are_dataloss_for_exactly_those_lsns() -> None:
    copies = {lsn(1, i): (1, 2) for i in range(1, 21)}
    nodes = cluster(copies)
    for node in nodes.values():
        node.records.pop(lsn(1, 7), None)
        node.records.pop(lsn(1, 8), None)
    core = ReaderCore(7, 1, lsn(1, 20), (1, 2, 3), 2)
    items = run(core, nodes, random.Random(4))
    assert gaps_of(items) == [(GapType.DATALOSS, lsn(1, 7), lsn(1, 8))]
    assert len(records_of(items)) == 18


def test_no_dataloss_while_a_holder_is_unreachable() -> None:
    # LSN 5 lives only on node 3 (the other copy is gone), and node 3 is away:
    # an f-majority (2 of 3) cannot be reached... nodes 1 and 2 are, and they
    # do not have it.  With R=2, |nodeset| - R + 1 = 2 nodes suffice to decide;
    # so take R=1 on 3 nodes, where all 3 must agree.
    copies = {lsn(1, i): (1,) for i in range(1, 11)}
    copies[lsn(1, 5)] = (3,)
    nodes = cluster(copies)
    nodes[3].reachable = False
    core = ReaderCore(7, 1, lsn(1, 10), (1, 2, 3), 1)
    core.on_unreachable(3, 0.0)
    items = run(core, nodes, random.Random(5), steps=300)
    assert [x for x, _ in records_of(items)] == [lsn(1, i) for i in range(1, 5)]
    assert gaps_of(items) == []
    assert not core.healthy
    assert not core.done
    # Node 3 comes back: the record arrives, no gap at all.
    nodes[3].reachable = True
    core.on_reachable(3, 10.0)
    items += run(core, nodes, random.Random(5))
    assert [x for x, _ in records_of(items)] == sorted(copies)
    assert gaps_of(items) == []


def test_a_corrupt_copy_is_read_from_another_holder_at_once() -> None:
    # R=2: node 1 is the first of every copyset (it sends under single-copy
    # delivery) and reports LSNs 5..7 unreadable; node 2 holds good copies.
    copies = {lsn(1, i): (1, 2) for i in range(1, 21)}
    nodes = cluster(copies)
    nodes[1].corrupt = {lsn(1, 5), lsn(1, 6), lsn(1, 7)}
    core = ReaderCore(7, 1, lsn(1, 20), (1, 2, 3), 2, stall_s=2.0)
    clock: list[float] = []
    items = run(core, nodes, random.Random(6), clock=clock)
    assert records_of(items) == [(x, b"p%d" % x) for x in sorted(copies)]
    assert gaps_of(items) == []
    assert clock == [0.0]  # no stall timer waited on


def test_copies_corrupt_everywhere_are_one_checksum_fail_gap() -> None:
    # R=1: the only copies of 5..6 fail their checksum; the records before
    # them are delivered, then a CHECKSUM_FAIL gap over exactly 5..6, then the rest.
    copies = {lsn(1, i): (1,) for i in range(1, 11)}
    nodes = cluster(copies)
    nodes[1].corrupt = {lsn(1, 5), lsn(1, 6)}
    core = ReaderCore(7, 1, lsn(1, 10), (1, 2, 3), 1)
    clock: list[float] = []
    items = run(core, nodes, random.Random(7), clock=clock)
    assert [x for x, _ in records_of(items)] == [lsn(1, i) for i in (1, 2, 3, 4, 7, 8, 9, 10)]
    assert gaps_of(items) == [(GapType.CHECKSUM_FAIL, lsn(1, 5), lsn(1, 6))]
    order = [i.lo if isinstance(i, GapItem) else i.lsns[0] for i in items]
    assert order == sorted(order)  # the gap comes in its place, between the records
    assert clock == [0.0]
    # Both copies corrupt with R=2: the same gap, and a loss next to it stays DATALOSS.
    copies = {lsn(1, i): (1, 2) for i in range(1, 11)}
    nodes = cluster(copies)
    for n in (1, 2):
        nodes[n].corrupt = {lsn(1, 3)}
        nodes[n].records.pop(lsn(1, 4))
    core = ReaderCore(7, 1, lsn(1, 10), (1, 2, 3), 2)
    items = run(core, nodes, random.Random(8))
    assert gaps_of(items) == [
        (GapType.CHECKSUM_FAIL, lsn(1, 3), lsn(1, 3)),
        (GapType.DATALOSS, lsn(1, 4), lsn(1, 4)),
    ]


def test_trim_hole_and_bridge_records() -> None:
    copies = {lsn(1, i): (1, 2) for i in range(1, 11)}
    nodes = cluster(copies)
    for node in nodes.values():
        node.trim = lsn(1, 3)
        if node.node_id in (1, 2):
            node.records[lsn(1, 6)] = ((1, 2), b"", HOLE)
            node.records[lsn(1, 11)] = ((1, 2), b"", BRIDGE)
            node.records[lsn(2, 1)] = ((1, 2), b"e2", 0)
    core = ReaderCore(7, 1, lsn(2, 1), (1, 2, 3), 2)
    items = run(core, nodes, random.Random(6))
    assert gaps_of(items) == [
        (GapType.TRIM, E1 | 1, lsn(1, 3)),
        (GapType.HOLE, lsn(1, 6), lsn(1, 6)),
        (GapType.BRIDGE, lsn(1, 11), E2),
    ]
    assert [x for x, _ in records_of(items)][-1] == lsn(2, 1)


def test_a_local_floor_sends_the_reader_to_the_object_store_first() -> None:
    """One node's local floor is enough: the LSNs at or below it are read
    from the object store (the shell's part) before anything after them, and
    never called missing, although that node sends none of them."""
    for seed in range(20):
        rng = random.Random(seed)
        copies = {lsn(1, i): tuple(rng.sample([1, 2, 3], 2)) for i in range(1, 31)}
        nodes = cluster(copies)
        nodes[rng.choice([1, 2, 3])].floor = lsn(1, 10)  # the others have not dropped yet
        core = ReaderCore(7, 1, lsn(1, 30), (1, 2, 3), 2)
        items = run(core, nodes, rng)
        tiered = [x for x in items if isinstance(x, tuple)]
        assert tiered == [("tiered", E1 | 1, lsn(1, 10))]
        rest = items[items.index(tiered[0]) + 1 :]
        assert [x for x, _ in records_of(rest)] == list(range(lsn(1, 11), lsn(1, 31)))
        assert gaps_of(items) == []


def test_a_stalled_node_is_routed_around() -> None:
    rng = random.Random(7)
    copies = {lsn(1, i): tuple(rng.sample([1, 2, 3], 2)) for i in range(1, 51)}
    nodes = cluster(copies)
    nodes[1].release = lsn(1, 10)  # node 1 did not hear the later releases
    core = ReaderCore(7, 1, lsn(1, 50), (1, 2, 3), 2, stall_s=2.0)
    items = run(core, nodes, rng)
    assert [x for x, _ in records_of(items)] == sorted(copies)
    assert gaps_of(items) == []
    assert 1 in core.known_down


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(3, 5),
    st.integers(1, 3),
    st.lists(st.tuples(st.integers(1, 3), st.integers(1, 25)), min_size=1, max_size=4),
    st.sets(st.integers(1, 40), max_size=4),
    st.integers(0, 5),
)
def test_random_clusters(
    seed: int, n: int, r: int, epochs: list[tuple[int, int]], lost: set[int], away: int
) -> None:
    """Whatever the copysets, losses and unreachable node: records in order,
    once each; DATALOSS only where every copy is gone; BRIDGE only between epochs."""
    rng = random.Random(seed)
    r = min(r, n)
    nodeset = tuple(range(1, n + 1))
    copies: dict[int, tuple[int, ...]] = {}
    epoch = 0
    for step, count in sorted(epochs):
        epoch += step
        for i in range(1, count + 1):
            copies[lsn(epoch, i)] = tuple(rng.sample(nodeset, r))
    nodes = cluster(copies, n)
    all_lsns = sorted(copies)
    gone = {all_lsns[i % len(all_lsns)] for i in lost}
    for x in gone:
        for node in nodes.values():
            node.records.pop(x, None)
    absent = 0
    if away and r > 1:
        absent = (away % n) + 1
        nodes[absent].reachable = False
    core = ReaderCore(9, 1, all_lsns[-1], nodeset, r, credit=rng.randint(2, 20))
    if absent:
        core.on_unreachable(absent, 0.0)
    items = run(core, nodes, rng, steps=20_000)
    assert core.done
    got = [x for x, _ in records_of(items)]
    assert got == sorted(set(got))
    assert set(got) == set(all_lsns) - gone
    covered = set()
    for typ, lo, hi in gaps_of(items):
        assert typ in (GapType.DATALOSS, GapType.BRIDGE)
        inside = {x for x in all_lsns if lo <= x <= hi}
        assert inside <= gone, (typ, lo, hi)
        if typ == GapType.BRIDGE:
            assert not any(x > lo and x >> 32 == lo >> 32 for x in got)
        covered |= inside
    assert covered == gone


def _window_after(payload_size: int) -> int:
    """One node's credit window after it sent (always within its credit) and
    the reader delivered 10,000 records of ``payload_size`` bytes."""
    core = ReaderCore(
        1, E1 + 1, E1 + 10_000, (1,), 1, credit=1000, credit_max=8000, window_bytes=800_000
    )
    granted = 1000
    sent = 0
    while sent < 10_000:
        core.take()
        n = min(granted - sent, 500, 10_000 - sent)
        assert n > 0, "the node ran out of credit"
        lsns = tuple(range(E1 + 1 + sent, E1 + 1 + sent + n))
        batch = make_batch(lsns, [b"x" * payload_size] * n, timestamps_ms=0)
        sent += n
        core.on_records(1, core.generation, E1 + 1 + sent, 0, views(batch), 0.0)
        core.poll(0.0)
        granted += sum(a.records for a in core.actions if isinstance(a, GrantCredit))
    return core.nodes[1].window


def test_credit_window_grows_for_small_records_only() -> None:
    # 100 B records: 800 kB / 100 B = 8,000 records in flight at most.
    assert _window_after(100) == 8000
    # 10 KiB records: the byte budget keeps the starting window.
    assert _window_after(10_240) == 1000


def test_a_reader_needs_a_timer_only_while_a_node_may_be_stalled() -> None:
    """Stall detection is the only reason to look at a reader with no new
    input: with every node at the same position (a tail with nothing new)
    it asks for no timer, so thousands of idle logs cost a client nothing."""
    core = ReaderCore(7, lsn(1, 5), LSN_MAX, (1, 2, 3), 2, stall_s=2.0)
    gen = core.generation
    for node in (1, 2, 3):
        core.on_records(node, gen, lsn(1, 5), 0, [], 0.0, 0, [])
    core.poll(0.0)
    assert core.next_deadline(0.0) == float("inf")
    core.on_records(2, gen, lsn(1, 9), 0, [], 0.5, 0, [])  # node 2 moves on
    core.poll(0.5)
    assert core.next_deadline(0.5) == 1.5  # others may be stalled behind it
    # A read that reached its end needs nothing either.
    done = ReaderCore(7, lsn(1, 3), lsn(1, 3), (1, 2, 3), 2)
    for node in (1, 2, 3):
        a = views(batch_of((lsn(1, 3),), (b"x",), (0,)))
        done.on_records(node, done.generation, lsn(1, 4), 0, a, 0.0, 0, [])
    done.poll(0.0)
    assert done.done
    assert done.next_deadline(0.0) == float("inf")


def test_many_logs_share_the_read_budget() -> None:
    """``read_many``'s windows: one log gets a single reader's window; 10,000
    logs over 3 nodes share 64 MiB (at least 16 records each)."""
    from logstrand.client._many import CREDIT_MIN, windows

    assert windows(64 << 20, 1, 3) == (8192, 8 << 20)
    credit, window = windows(64 << 20, 10_000, 3)
    assert credit == CREDIT_MIN
    assert window * 10_000 * 3 <= 64 << 20
    assert windows(64 << 20, 100, 3) == (218, (64 << 20) // 300)  # 1 KiB records assumed


def test_a_quiet_log_s_next_record_is_no_stall() -> None:
    """Nodes stood still on a quiet log for a minute; a record arrives from
    one node before the others heard of its release.  That is no stall: the
    others get ``stall_s`` from then, not from when they last moved.  (The
    code before marked a node down and rewound at once, a rewind and an
    all-send-all round for the first record after every quiet spell.)"""
    core = ReaderCore(7, lsn(1, 5), LSN_MAX, (1, 2, 3), 2, stall_s=2.0)
    gen = core.generation
    for node in (1, 2, 3):
        core.on_records(node, gen, lsn(1, 5), 0, [], 0.0, 0, [])
    core.poll(0.0)
    record = views(batch_of((lsn(1, 5),), (b"new",), (0,)).reheader(copyset=(1, 2)))
    core.on_records(1, gen, lsn(1, 6), 0, record, 60.0, 0, [])
    core.poll(60.0)
    assert (core.known_down, core.rewinds) == (set(), 1)
    core.poll(61.0)
    assert (core.known_down, core.rewinds) == (set(), 1)
    for node in (2, 3):  # their release arrives
        core.on_records(node, gen, lsn(1, 6), 0, [], 61.1, 0, [])
    core.poll(61.1)
    items, _ = core.take()
    assert [x for x, _ in records_of(items)] == [lsn(1, 5)]
    assert (core.known_down, core.rewinds) == (set(), 1)
    # A node that really stays behind is still found out, stall_s later.
    core.on_records(1, gen, lsn(1, 9), 0, [], 70.0, 0, [])
    core.poll(70.0)
    core.poll(72.0)
    assert core.known_down == {2}
    assert core.rewinds == 2


def test_slow_nodes_never_leave_a_reader_without_a_frontier() -> None:
    """Nodes listed down for being slow, one after another: when the last
    node that counts is slow too, the slow ones count again instead (the
    code before could list every node down, and then delivered nothing ever)."""
    core = ReaderCore(7, lsn(1, 1), LSN_MAX, (1, 2, 3), 2, stall_s=2.0)
    now = 0.0
    for slow in (2, 3, 1):
        gen = core.generation
        ahead = next(n for n in (1, 2, 3) if n != slow)
        for node in (1, 2, 3):
            core.on_records(node, gen, lsn(1, 1), 0, [], now, 0, [])
        core.on_records(ahead, gen, lsn(1, 2), 0, [], now, 0, [])
        core.poll(now)
        now += 2.5
        core.poll(now)
    assert core._counting() != []
    assert core.known_down == set()  # all forgiven at the third


def test_a_later_epoch_on_other_nodes_waits_for_the_placement_not_dataloss() -> None:
    """The reader knows the log's nodesets up to epoch 1 (nodes 1-3).  Epoch 2
    put its records on nodes 4 and 5, which joined the cluster: nodes 1-3
    move past them without sending any.  The reader asks for the placement
    again instead of calling them lost, and reads them off the new nodes.
    (The code before reported DATALOSS over epoch 2's records.)"""
    core = ReaderCore(7, lsn(2, 1), LSN_MAX, (1, 2, 3), 2, stall_s=2.0, known_epoch=1)
    for node in (1, 2, 3):
        core.on_records(node, core.generation, lsn(2, 4), 0, [], 0.0, 0, [])
    for now in (0.0, 1.0, 5.0):
        core.poll(now)
        for node in (1, 2, 3):  # rewound streams say the same again
            core.on_records(node, core.generation, lsn(2, 4), 0, [], now, 0, [])
    items, _ = core.take()
    assert items == []
    assert core.wants_placement
    core.set_placement((1, 2, 3, 4, 5), 2, 2, 6.0)
    items, actions = core.take()
    assert {a.node_id for a in actions if isinstance(a, StartStream)} == {1, 2, 3, 4, 5}
    new = views(batch_of((lsn(2, 1), lsn(2, 2), lsn(2, 3)), (b"a", b"b", b"c"), (0, 0, 0)))
    for node in (1, 2, 3, 5):
        core.on_records(node, core.generation, lsn(2, 4), 0, [], 6.1, 0, [])
    core.on_records(4, core.generation, lsn(2, 4), 0, new, 6.1, 0, [])
    core.poll(6.1)
    items, _ = core.take()
    assert [x for x, _ in records_of(items)] == [lsn(2, 1), lsn(2, 2), lsn(2, 3)]
    assert gaps_of(items) == []
    assert not core.wants_placement
    # A node that left every nodeset is told to stop.
    core.set_placement((1, 2, 4, 5), 2, 3, 7.0)
    _, actions = core.take()
    assert [a for a in actions if isinstance(a, StopStream)] == [StopStream(3)]

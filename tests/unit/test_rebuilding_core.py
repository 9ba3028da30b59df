"""Rebuilding's pure decisions: the state's transitions, the leader and the
placement of new copies, what a starting node does, and a seeded model of a
cluster (copies on nodes, losses with wiped disks, drains, donors that crash
part way, nodes that come back) driven through those same functions, with
the checkers of the simulation: after a finished rebuilding every record has
R copies on nodes that are not rebuilt away, and no reader would report
DATALOSS for a record that has a copy."""

from __future__ import annotations

import random

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.client._reader_core import ReaderCore
from logstrand.errors import NotFoundError
from logstrand.rebuilding import (
    DonorProgress,
    Mode,
    RebuildingState,
    Start,
    StorageState,
    leader,
    new_copies,
    on_start,
)
from logstrand.rebuilding import _core as core

E = StorageState
NODES = (1, 2, 3, 4, 5)


def req(s: RebuildingState, n: int, mode: Mode = Mode.REBUILD, r_min: int = 2) -> RebuildingState:
    return core.request(s, n, mode, "test", storage=NODES, replication_min=r_min, now_ms=0)


def end(s: RebuildingState, n: int) -> RebuildingState:
    return core.remove_shard(s, n, storage=NODES, replication_min=2, now_ms=0)


def all_done(s: RebuildingState) -> RebuildingState:
    assert s.run is not None
    done = {d: DonorProgress(done=True) for d in s.run.donors}
    return core.finish(s, s.run.id, done, 10)


def test_a_run_per_change_of_the_set() -> None:
    s = req(RebuildingState(), 5)
    assert s.run is not None
    assert (s.run.id, s.run.nodes, s.run.donors, s.run.authoritative) == (
        1,
        (5,),
        (1, 2, 3, 4),
        True,
    )
    assert req(s, 5) is s  # asked twice: nothing changes
    s2 = req(s, 4)
    assert s2.run is not None
    assert (s2.run.id, s2.run.nodes, s2.run.donors) == (2, (4, 5), (1, 2, 3))
    assert not s2.run.authoritative  # two lost with R=2: a record may be on both
    # Not every donor done: the run goes on.
    assert core.finish(s2, 2, {1: DonorProgress(done=True)}, 5) == s2
    assert core.finish(s2, 1, {}, 5) == s2  # an old run's id changes nothing
    s3 = all_done(s2)
    assert s3.run is None
    assert {n: s3.shards[n].state for n in (4, 5)} == {4: E.UNDERREPLICATION, 5: E.UNDERREPLICATION}
    s4 = core.mark_unrecoverable(s3, 4)
    assert s4.shards[4].state is E.AUTHORITATIVE_EMPTY
    with pytest.raises(NotFoundError):
        core.mark_unrecoverable(s4, 1)


def test_drains_donate_and_end_empty_even_when_many() -> None:
    s = req(req(RebuildingState(), 4, Mode.DRAIN), 5, Mode.DRAIN)
    assert s.run is not None
    assert s.run.donors == NODES  # drained nodes still have their data
    assert s.run.authoritative
    assert s.storage_state(4, True) is E.FULLY_AUTHORITATIVE  # a drain under way
    s = all_done(s)
    assert s.shards[4].state is E.AUTHORITATIVE_EMPTY
    assert core.removable(s, 4) is None
    assert "not drained" in (core.removable(s, 1) or "")
    # A drained node that dies is already empty: nothing to rebuild.
    assert req(s, 4, Mode.DRAIN) is s
    s = end(s, 4)  # undrain
    assert 4 not in s.shards


def test_authority_for_readers_and_recovery() -> None:
    s = req(req(RebuildingState(), 2), 3, Mode.DRAIN)
    a = s.authority()
    assert a.untrusted == {2}  # rebuilding: its "not here" means nothing
    assert a.empty == frozenset()
    assert a.no_writes == {2, 3}
    s = all_done(s)
    a = s.authority()
    assert a.empty == {2, 3}
    assert a.excluded == {2, 3}


def test_on_start() -> None:
    s = core.hold(RebuildingState(), 1, "m1")
    assert on_start(RebuildingState(), 1, "m1") == Start.FIRST
    assert on_start(s, 1, "m1") == Start.NORMAL
    assert on_start(s, 1, None) == Start.WIPED
    assert on_start(s, 1, "other") == Start.WIPED
    r = req(s, 1)
    assert on_start(r, 1, "m1") == Start.ABORT  # back with its data
    assert on_start(r, 1, "new") == Start.NORMAL  # wiped, restarted mid-rebuild
    done = all_done(r)
    assert on_start(done, 1, "new") == Start.ACK
    assert on_start(done, 1, "m1") == Start.ACK


def test_one_leader_and_placement_rules() -> None:
    s = req(RebuildingState(), 3)
    run = s.run
    assert run is not None
    assert leader((1, 2), run) is None  # nothing lost
    assert leader((3, 2), run) == 2
    assert leader((3, 1, 2), run) == 1
    domains = {1: "a", 2: "a", 3: "b", 4: "c", 5: "c"}
    for seed in range(50):
        plan = new_copies(
            (3, 2),
            run,
            2,
            NODES,
            no_writes={5},
            domains=domains,
            rng=random.Random(seed),
        )
        assert plan is not None
        # Not in the copyset, the run or no_writes; another domain than 2's.
        assert plan.recipients == (4,)
        assert plan.copyset == (2, 4)
        assert plan.amend == ()
        assert new_copies((3, 2), run, 1, NODES) is None  # 1 is not the leader
    short = new_copies((3, 2), run, 2, (2, 3))
    assert short is not None
    assert (short.recipients, short.short) == ((), 1)


# -- a model cluster --------------------------------------------------------------------


@attrs.define
class Model:
    """Records 0..n-1, each a stored batch with a copyset; per node what it holds."""

    r: int
    rng: random.Random
    alive: set[int] = attrs.Factory(lambda: set(NODES))
    holds: dict[int, dict[int, tuple[int, ...]]] = attrs.Factory(dict)  # node → rec → copyset
    state: RebuildingState = attrs.Factory(RebuildingState)
    progress: dict[tuple[int, int], DonorProgress] = attrs.Factory(dict)
    records: int = 0
    lost: set[int] = attrs.Factory(set)
    lost_together: set[int] = attrs.Factory(set)

    def lose(self, n: int) -> None:
        """Node ``n``'s disk is gone: records with no other copy are lost (a
        drained node's copies do not count: the cluster no longer needs them)."""
        self.alive.discard(n)
        empty = self.state.authority().empty
        for rec in self.holds.pop(n, {}):
            if not any(rec in self.holds.get(x, {}) for x in NODES if x not in empty):
                self.lost.add(rec)

    def append(self, count: int) -> None:
        writable = [
            n for n in NODES if n in self.alive and n not in self.state.authority().no_writes
        ]
        for _ in range(count):
            if len(writable) < self.r:
                return
            cs = tuple(self.rng.sample(writable, self.r))
            for n in cs:
                self.holds.setdefault(n, {})[self.records] = cs
            self.records += 1

    def request(self, n: int, mode: Mode) -> None:
        self.state = core.request(
            self.state, n, mode, "model", storage=NODES, replication_min=self.r, now_ms=0
        )

    def donate(self, donor: int, budget: int | None = None) -> None:
        """``donor`` walks its copies from its progress on; ``budget``: it
        crashes after that many records (its progress persisted per record)."""
        run = self.state.run
        if run is None or donor not in run.donors or donor not in self.alive:
            return
        key = (run.id, donor)
        p = self.progress.get(key, DonorProgress())
        pos = p.logs.get(1, -1) + 1
        mine = sorted(rec for rec in self.holds.get(donor, {}) if rec >= pos)
        for i, rec in enumerate(mine):
            if budget is not None and i >= budget:
                return  # crashed: the progress so far is kept
            cs = self.holds[donor][rec]
            plan = new_copies(
                cs,
                run,
                donor,
                NODES,
                no_writes=self.state.authority().no_writes,
                avoid={n for n in NODES if n not in self.alive},
                rng=self.rng,
            )
            if plan is not None:
                for n in plan.recipients:
                    self.holds.setdefault(n, {})[rec] = plan.copyset
                for n in (donor, *plan.amend):
                    if rec in self.holds.get(n, {}):
                        self.holds[n][rec] = plan.copyset
            p = DonorProgress({1: rec}, p.records + 1)
            self.progress[key] = p
        self.progress[key] = attrs.evolve(p, done=True)

    def finish(self) -> None:
        run = self.state.run
        if run is not None:
            got = {d: self.progress.get((run.id, d), DonorProgress()) for d in run.donors}
            self.state = core.finish(self.state, run.id, got, 0)

    # -- checkers ---------------------------------------------------------------------

    def check_r_copies(self) -> None:
        """After a finished run: R copies off the rebuilt nodes, of every
        record that kept a copy (``lost``: those that did not)."""
        gone = {n for n, s in self.state.shards.items() if s.state is E.AUTHORITATIVE_EMPTY}
        for rec in range(self.records):
            holders = {n for n in NODES if rec in self.holds.get(n, {}) and n not in gone}
            if rec not in self.lost:
                assert len(holders) >= self.r, (rec, holders, self.state)

    def check_no_false_loss(self) -> None:
        """What ``ReaderCore`` decides for an LSN no live node sends: DATALOSS
        once an f-majority of the nodes it counts (alive, not empty, not
        being rebuilt) lacks it.  Never while a node that is down (its disk
        intact) has a copy, nor while a rebuilding could not find every
        record and no operator has said its losses are final."""
        a = self.state.authority()
        reader = ReaderCore(1, 0, 10, NODES, self.r)
        reader.set_authority(a.empty, a.untrusted)
        counted = [n for n in NODES if n in self.alive and n not in a.empty | a.untrusted]
        # Disks lost together (records may be gone) and no operator has
        # accepted the loss yet: the model's own account, not the state's.
        waiting = bool(self.lost_together)
        for rec in range(self.records):
            holders = {n for n in NODES if rec in self.holds.get(n, {})}
            if holders & self.alive:
                continue  # sent by a live node: delivered, no gap
            if holders or waiting:
                lacking = [n for n in counted if rec not in self.holds.get(n, {})]
                assert len(lacking) < reader.f_majority, (rec, holders, lacking, self.state)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), r=st.sampled_from([2, 3]))
def test_model_rebuildings_keep_r_copies_and_never_report_false_loss(seed: int, r: int) -> None:
    rng = random.Random(seed)
    m = Model(r, rng)
    m.append(60)
    for _ in range(4):
        healthy = [n for n in NODES if n in m.alive and n not in m.state.shards]
        if len(healthy) <= r:
            break
        victim = rng.choice(healthy)
        if rng.random() < 0.3:
            m.request(victim, Mode.DRAIN)  # it stays up
        else:
            m.lose(victim)
            if rng.random() < 0.5:
                m.alive.add(victim)  # back at once, empty: it asks itself
            m.request(victim, Mode.REBUILD)
            others = [n for n in healthy if n != victim]
            if rng.random() < 0.2 and len(others) > r:
                second = rng.choice(others)  # two disks lost at once
                m.lose(second)
                m.request(second, Mode.REBUILD)
                m.lost_together |= {victim, second}
        m.check_no_false_loss()
        m.append(rng.randrange(20))  # appends go on, never to the rebuilt node
        run = m.state.run
        assert run is not None
        for donor in run.donors:
            # Some donors crash part way, then start again from their progress.
            if rng.random() < 0.3:
                m.donate(donor, budget=rng.randrange(10))
                m.check_no_false_loss()
        for donor in run.donors:
            m.donate(donor)
        m.finish()
        assert m.state.run is None
        m.check_r_copies()
        m.check_no_false_loss()
        up = [n for n in NODES if n in m.alive and n not in m.state.shards]
        if up and rng.random() < 0.5:
            down = rng.choice(up)  # a crash, disk intact: UNAVAILABLE for a while
            m.alive.discard(down)
            m.check_no_false_loss()
            m.alive.add(down)
        for n, shard in list(m.state.shards.items()):
            if shard.state is E.UNDERREPLICATION and rng.random() < 0.5:
                m.state = core.mark_unrecoverable(m.state, n)  # the operator's word
                if n in m.lost_together:
                    m.lost_together.clear()
                m.check_no_false_loss()
            st_now = m.state.shards.get(n)
            if (
                n in m.alive
                and st_now
                and st_now.mode is Mode.REBUILD
                and st_now.state is E.AUTHORITATIVE_EMPTY
            ):
                # Rebuilt: a running node acknowledges (the others do when
                # they start), and is in service again.
                m.state = core.remove_shard(m.state, n, storage=NODES, replication_min=r, now_ms=0)
        m.check_no_false_loss()


def test_model_a_node_back_with_its_data_aborts() -> None:
    m = Model(2, random.Random(7))
    m.state = core.hold(m.state, 3, "disk-of-3")
    m.append(50)
    kept = m.holds[3]
    m.alive.discard(3)
    m.request(3, Mode.REBUILD)
    m.donate(1, budget=5)  # part way
    m.alive.add(3)
    m.holds[3] = kept
    assert on_start(m.state, 3, "disk-of-3") == Start.ABORT
    m.state = core.remove_shard(m.state, 3, storage=NODES, replication_min=2, now_ms=0)
    assert m.state.run is None
    assert m.state.storage_state(3, True) is E.FULLY_AUTHORITATIVE
    m.check_no_false_loss()
    m.check_r_copies()

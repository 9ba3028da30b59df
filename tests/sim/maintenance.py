"""The maintenance scenario: after a run with faults has healed, the log is
trimmed, a compaction pass runs over it, and one node loses its disk and is
rebuilt, while readers go on reading (the liveness checker with them).

Each step goes through the production rules, as the node's shells call them:
``NodeStore.trim`` for TRIM, ``NodeStore.drop_copies`` for a pass's
DROP_COPIES (with the offset map of ``compaction``), and for rebuilding the
donors' windows (``_rules.donation_windows``, ``servable_windows``,
``cut_to_windows``), rebuilding's placement (``rebuilding.new_copies``), its
STORE (``_rules.rebuilt_copies``) taken by the recipients' ``NodeStore.commit``
and the copyset amendments (``NodeStore.amend``).  What is simulated here is
only who calls them when: the trio shells' retries, throttles and progress
records are not (``tests/integration`` runs those on real nodes).

``check_maintained`` then holds the outcome to the promises: records at or
below the trim point are gone behind a TRIM gap; within the pass, exactly the
records a later record of their key supersedes are gone (COMPACTED, or no gap
at all); everything else acknowledged is read once at its LSN, by readers that
are told the rebuilt node is empty and by readers that find out; and every
such record has R copies off the lost node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from logstrand import wire
from logstrand.compaction import OffsetMap
from logstrand.compaction._offset_map import hash_keys
from logstrand.errors import Status
from logstrand.rebuilding import Run, new_copies
from logstrand.storage import _rules as node_rules
from logstrand.testing import MemoryEngine
from logstrand.types import LSN_MAX, GapType

from . import checks
from .config import LOG, Config, Violation
from .world import World

if TYPE_CHECKING:
    from collections.abc import Generator

    from logstrand.batch import PackedBatch

    from .node import SimNode

#: Keys the clients draw from: few, so most records are superseded.
KEYS = 7


def run_maintenance(seed: int, config: Config | None = None) -> tuple[World, dict[str, Any]]:
    """A run (``World.run``), its usual checks, then the maintenance and its checks."""
    world = World(seed, config or attrs.evolve(Config.for_seed(seed), keys=KEYS))
    try:
        world.run()
        checks.check(world)
        summary = maintain(world)
    except Violation as exc:
        raise Violation(
            f"seed {seed} ({world.config}): {exc}\n"
            f"replay: python -m tests.sim --seed {seed} --maintenance --trace\n"
            f"last events:\n{world.tail()}"
        ) from None
    return world, summary


def maintain(world: World) -> dict[str, Any]:
    acked = _acked(world)
    lsns = sorted(acked.values())
    trim_point, end = lsns[len(lsns) // 4], lsns[3 * len(lsns) // 4]
    readable = _read_all(world, lsns[-1])

    # 1. Trim: every node takes the TRIM (as TrimLog's fan-out sends it).
    world.note(f"maintenance: trim to {trim_point:#x}")
    for node in _up(world):
        reply = node.store.trim(wire.Trim(1, LOG, trim_point))  # type: ignore[union-attr]
        _require(reply.status == Status.OK, f"node {node.id} refused the trim: {reply}")
    world.excused |= {p for p, lsn in acked.items() if lsn <= trim_point}
    world.run_until(world.now + 2.0)

    # 2. A compaction pass over (trim point, end]: the map from what readers
    #    read, then every node drops what it supersedes.
    latest = {key: lsn for lsn, key in sorted(readable.items()) if lsn <= end}
    superseded = {
        p for p, lsn in acked.items() if trim_point < lsn <= end and latest[readable[lsn]] > lsn
    }
    world.note(f"maintenance: compaction pass to {end:#x}, {len(superseded)} superseded")
    offsets = OffsetMap(1 << 20)
    offsets.put_many(hash_keys(list(latest)), np.array(list(latest.values()), dtype=np.uint64))
    drop = wire.DropCopies(2, LOG, end, 0, 0, 0, offsets.entries())
    removed = 0
    for node in _up(world):
        reply = _finish(node.store.drop_copies(drop))  # type: ignore[union-attr]
        _require(reply.status == Status.OK and reply.done_to == end, f"drop: {reply}")
        removed += reply.removed
    world.excused |= superseded
    world.run_until(world.now + 2.0)

    # 3. A node loses its disk; the others re-create its copies; it comes back empty.
    victim = world.nodes[world.rng.choice(sorted(world.nodes))]
    world.note(f"maintenance: node {victim.id} loses its disk")
    victim.crash()
    victim.engine = MemoryEngine()
    run = Run(1, (victim.id,), tuple(n for n in sorted(world.nodes) if n != victim.id), 0, True)
    recreated = 0
    if not world.config.break_rebuild:
        for donor in _up(world):
            recreated += _donate(world, donor, run)
    world.rebuilt = frozenset({victim.id})
    victim.start()
    world.run_until(world.now + 3.0)
    gone = {
        lsn
        for lsn, key in readable.items()
        if lsn <= trim_point or (lsn <= end and latest[key] > lsn)
    }
    summary = check_maintained(world, acked, trim_point, superseded, gone, victim.id)
    return {**summary, "removed": removed, "recreated": recreated}


def _donate(world: World, donor: SimNode, run: Run) -> int:
    """One donor's pass over its copies of the log, as ``Donor._donate_log``
    walks them: the copies it leads get new copies off the lost nodes."""
    store = donor.store
    assert store is not None
    release = store.release_of(LOG)
    nodeset = tuple(sorted(world.nodes))
    estore = world.estore
    recreated = 0
    pos = 1
    for _ in range(100_000):  # bounded: each round moves ``pos`` on
        if pos > release:
            break
        got = store.read_packed(LOG, pos, release, max_records=64, tolerant=True)
        work = node_rules.donation_windows(got.batches, pos, release)
        allowed = node_rules.servable_windows(work, release, lambda e: estore.epoch_end(LOG, e))
        for pb in node_rules.cut_to_windows(allowed):
            recreated += _recreate(world, donor, run, pb, nodeset, release)
        if not got.batches:
            break
        pos = got.scanned_to + 1
    return recreated


def _recreate(
    world: World, donor: SimNode, run: Run, pb: PackedBatch, nodeset: tuple[int, ...], release: int
) -> int:
    plan = new_copies(pb.copyset, run, donor.id, nodeset, rng=world.rng)
    if plan is None:
        return 0
    _require(not plan.short, f"no node for {plan.short} copies of {pb.first_lsn:#x}")
    msg = node_rules.rebuilt_copies(next(donor.ids), LOG, pb, plan.copyset, release)
    for n in plan.recipients:
        [reply] = world.nodes[n].store.commit([msg])  # type: ignore[union-attr]
        _require(reply.status == Status.OK, f"node {n} refused a rebuilt copy: {reply}")
    amend = wire.Amend(1, LOG, pb.first_lsn, pb.last_lsn, pb.copyset, plan.copyset)
    for n in (donor.id, *plan.amend):
        world.nodes[n].store.amend(amend)  # type: ignore[union-attr]
    return pb.count * len(plan.recipients)


def check_maintained(
    world: World,
    acked: dict[bytes, int],
    trim_point: int,
    superseded: set[bytes],
    gone: set[int],
    victim: int,
) -> dict[str, Any]:
    """``gone``: the LSNs trimmed or compacted away (acknowledged or not)."""
    until = max(acked.values())
    others = tuple(n for n in sorted(world.nodes) if n != victim)
    empty = frozenset({victim})
    readers = [
        checks.read(world, until, scd=True, empty=empty),
        checks.read(world, until, scd=False, empty=empty),
        checks.read(world, until, scd=True, down=(victim,)),
        checks.read(world, until, scd=False, answering=list(others)),
    ]
    flat = [checks.flatten(items) for items in readers]
    # Gaps may be cut differently (a reader that finds out later); records may not.
    records = [[x for x in f if x[0] == "record"] for f in flat]
    for k, other in enumerate(records[1:], 1):
        _require(other == records[0], f"reader {k} read other records than reader 0")
    seen = {payload: lo for _, lo, _, payload in records[0]}
    for kind, lo, hi, _ in flat[0]:
        if kind == "record":
            continue
        if kind == GapType.TRIM.name:
            _require(hi <= trim_point, f"TRIM gap {lo:#x}..{hi:#x} past {trim_point:#x}")
        elif kind not in (GapType.HOLE.name, GapType.BRIDGE.name, GapType.COMPACTED.name):
            raise Violation(f"{kind} gap {lo:#x}..{hi:#x} after maintenance")
    for payload, lsn in acked.items():
        removed = lsn <= trim_point or payload in superseded
        where = seen.get(payload)
        if removed:
            _require(where is None, f"{payload!r} at {lsn:#x} was removed but is read")
        else:
            _require(where == lsn, f"acknowledged {payload!r} at {lsn:#x}: read at {where}")
    _require_copies(world, {seen[p] for p in seen}, victim)
    for k, (_, snap) in enumerate(world.snapshots):
        for kind, lo, _, read in snap:
            where = None if read is None else seen.get(read)
            if kind == "record" and lo not in gone and where != lo:
                raise Violation(f"reader {k} got {read!r} at {lo:#x}; in the end it is not")
    return {"acked": len(acked), "records": len(seen), "excused": len(world.excused)}


def _require_copies(world: World, lsns: set[int], victim: int) -> None:
    """Every record read has R copies on the nodes that kept their disks."""
    copies = dict.fromkeys(lsns, 0)
    for node in _up(world):
        if node.id == victim:
            continue
        got = node.store.read_packed(LOG, 1, LSN_MAX, max_records=1 << 20, max_bytes=1 << 30)  # type: ignore[union-attr]
        held = {lsn for b in got.batches for lsn in b.lsns() if lsn in copies}
        for lsn in held:
            copies[lsn] += 1
    short = sorted(lsn for lsn, n in copies.items() if n < world.config.replication)
    _require(not short, f"{len(short)} records under R copies after rebuilding: {short[:3]}")


def _acked(world: World) -> dict[bytes, int]:
    acked: dict[bytes, int] = {}
    for client in world.clients.values():
        acked.update(client.acked)
    return acked


def _read_all(world: World, until: int) -> dict[int, bytes]:
    """Each record's key, read off the nodes by the production reader."""
    keys: dict[int, bytes] = {}
    for it in checks.read(world, until, scd=True):
        if hasattr(it, "keys"):
            for lsn, key in zip(it.lsns, it.keys, strict=True):
                keys[lsn] = key
    return keys


def _up(world: World) -> list[SimNode]:
    return [n for n in world.nodes.values() if n.up and n.store is not None]


def _finish(steps: Generator[int, None, Any]) -> Any:
    for _ in range(1_000_000):
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
    raise Violation("a drop never ended")


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise Violation(what)

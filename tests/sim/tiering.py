"""Tiered storage in the simulation: an object store of its own, with its
failures, and the production procedures of the offload and of a node's
answers driven over it while the run's faults go on.

What runs is production code: the offload's procedures
(``tier._offload_core``: upload, record, lost races, orphan sweeps), a
node's answers to ``TierRead`` (``tier._answers.TierAnswers``, with its
caches), the nodes' local retention (``storage._upkeep.apply_maintenance``
raising local floors and dropping partitions), the reader's core handing
the spans below a floor to the object store (``ReaderCore.take_tiered``)
and the client's reading of an answer (``_tier_reads.items_of``).  What is
simulated is who calls them when (each node's rounds, as ``Tiering`` runs
them), and the object store:

* it is unavailable for a while (every call fails), slow (a call takes up
  to 2 s, while nodes crash and views change), or fails up to one call in
  ten (after the client's own retries);
* a PUT that fails may have stored its object all the same (a timeout after
  the write): an object no segment names, for the sweep;
* it loses an object now and then, after it was recorded.

Nodes crash between any two steps of a procedure (mid-upload: after the
PUT, before the record), and two nodes whose views differ both upload a
range (one records it, the other deletes its object).

``check_tiered`` then holds the outcome to the promises, beside ``checks``'
own: every segment recorded names an object the store holds whole (or
lost on purpose); no node's floor passes its log's tiered point; and the
readers' records are every acknowledged record at its LSN, except those of
an object the store lost, which a DATALOSS gap covers (never a silent
skip): no acknowledged record is lost that the object store still holds.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from logstrand import wire
from logstrand.batch import crc32c
from logstrand.client._tier_reads import items_of
from logstrand.epochstore import SegmentField as F
from logstrand.errors import LogstrandError, Status
from logstrand.placement import rendezvous_owner, rendezvous_rank
from logstrand.storage._upkeep import LocalRetention, apply_maintenance
from logstrand.tier import _offload_core as offload_core
from logstrand.tier import build
from logstrand.tier._answers import TierAnswers
from logstrand.tier._objects import ObjectMissing, ObjectStoreError
from logstrand.tier._offload_core import OffloadStats, Uploader
from logstrand.tier._steps import (
    AwaitAhead,
    FindTime,
    NextItems,
    ObjectCall,
    OpenRead,
    Procedure,
    StoreCall,
    run_now,
)
from logstrand.types import LSN_MAX, GapType

from .config import Violation

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from logstrand.tier._format import Entry

    from .node import SimNode
    from .world import World

#: A log's partitions close this often on the nodes (so that there is
#: something to drop within a run of seconds).
PARTITION_MS = 400
TIER_AFTER_MS = 800
#: Objects grow to about this many bytes (several per round).
OBJECT_BYTES = 2_000
#: Seconds between a node's offload rounds; an orphan is this old at least.
ROUND_S = 0.4
ORPHAN_AGE_S = 3.0
#: Items one ``NextItems`` hands over.
ITEMS_PER_STEP = 4


class SimObjectStore:
    """Objects in memory, and the failures of an S3 API (module docstring).
    The calls are ``ObjectStore``'s; the driver decides when each happens
    and whether it fails (``call``)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.objects: dict[str, tuple[bytes, float]] = {}
        self.down_until = 0.0
        self.slow_until = 0.0
        self.error_rate = 0.0
        #: Objects lost after they were recorded: key -> (first, last) LSN.
        self.lost: dict[str, tuple[int, int]] = {}
        self.stats = dict.fromkeys(["calls", "failed", "landed_anyway", "lost"], 0)

    # what ``ObjectStore`` offers

    def put(self, name: str, data: bytes) -> None:
        self.objects[name] = (data, self.world.now + 1_700_000_000)

    def size(self, name: str) -> int:
        return len(self._get(name))

    def read(self, name: str, start: int, length: int) -> bytes:
        return self._get(name)[start : start + length]

    def delete(self, name: str) -> None:
        self.objects.pop(name, None)

    def listing(self, under: str = "") -> list[tuple[str, float]]:
        return sorted((k, w) for k, (_, w) in self.objects.items() if k.startswith(under))

    def _get(self, name: str) -> bytes:
        got = self.objects.get(name)
        if got is None:
            raise ObjectMissing(name)
        return got[0]

    # the simulation's side

    def latency(self) -> float:
        rng = self.world.rng
        slow = self.world.now < self.slow_until
        return rng.uniform(0.002, 0.02) + (rng.uniform(0.2, 2.0) if slow else 0.0)

    def call(self, cmd: ObjectCall) -> Any:
        """Perform ``cmd`` now, or fail it as the store's state says."""
        world = self.world
        self.stats["calls"] += 1
        if world.now < self.down_until or world.rng.random() < self.error_rate:
            self.stats["failed"] += 1
            if cmd.method == "put" and world.rng.random() < 0.3:
                self.stats["landed_anyway"] += 1
                self.put(*cmd.args)  # a timeout after the write
            raise ObjectStoreError(f"{cmd.method}: 503 SlowDown (simulated)")
        return getattr(self, cmd.method)(*cmd.args)

    def fault(self) -> None:
        """One of the store's failures, drawn (``World._fault`` calls it)."""
        world = self.world
        rng = world.rng
        pick = rng.random()
        if pick < 0.3:
            self.down_until = world.now + rng.uniform(0.2, 1.5)
            world.note(f"object store unavailable until {self.down_until:.3f}")
        elif pick < 0.6:
            self.slow_until = world.now + rng.uniform(0.5, 2.0)
            world.note(f"object store slow until {self.slow_until:.3f}")
        elif pick < 0.8:
            # What is left after the client's own retries (obstore tries a
            # call 4 times): a store answering 503 to 30% of requests fails
            # about 1% of calls.
            self.error_rate = rng.choice([0.0, 0.02, 0.1])
            world.note(f"object store fails {self.error_rate:.0%} of calls")
        else:
            self.lose()

    def lose(self) -> None:
        """Lose a recorded object (a bucket's operator deleted it, say)."""
        world = self.world
        named = [
            (str(seg[F.KEY]), seg[F.FIRST], seg[F.LAST])
            for log in world.config.log_ids
            for seg in world.estore.tier_state(log)[1]
            if str(seg[F.KEY]) in self.objects
        ]
        if not named:
            return
        key, first, last = world.rng.choice(named)
        del self.objects[key]
        self.lost[key] = (first, last)
        self.stats["lost"] += 1
        world.note(f"object store lost {key}")

    def lost_at(self, lsn: int) -> bool:
        return any(lo <= lsn <= hi for lo, hi in self.lost.values())


class SimTier:
    """The tiering of a run: the store, each node's rounds, and the readers'
    way to the objects (``span``, ``first``)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.store = SimObjectStore(world)
        self.stats = OffloadStats()
        #: Each node's answers (their caches live as long as its process).
        self.answers: dict[tuple[int, int], TierAnswers] = {}
        self.tokens = iter(range(1, 1 << 62))
        #: Readers' answers from the objects: below the tiered point first,
        #: and for the spans below the nodes' floors.
        self.reads = dict.fromkeys(["first", "span"], 0)

    # the nodes' rounds

    def start(self, node: SimNode) -> None:
        self.world.at(self.world.rng.uniform(0.0, ROUND_S), self._round, node, node.incarnation)

    def _round(self, node: SimNode, incarnation: int) -> None:
        world = self.world
        if not node.alive(incarnation):
            return
        world.at(ROUND_S, self._round, node, incarnation)
        if node.paused_until > world.now or node.tiering:
            return
        self._keep_less(node)
        logs = self._owned(node)
        if logs:
            node.tiering = True
            node.run(self._offload_all(node, logs), lambda *_: self._done(node, incarnation))

    def _done(self, node: SimNode, incarnation: int) -> None:
        if node.alive(incarnation):
            node.tiering = False

    def _owned(self, node: SimNode) -> list[int]:
        up = node.reachable() | {node.id}
        return [
            log
            for log in self.world.config.log_ids
            if rendezvous_owner(log, dict.fromkeys(sorted(up), 1.0)) == node.id
        ]

    def _offload_all(self, node: SimNode, logs: list[int]) -> Procedure:
        """One round, as ``Offload.round``: for each owned log, the segments
        a trim left behind, then the offload; a failure waits for the next
        round; then the sweep for orphans."""
        world = self.world
        up = Uploader(node.id, OBJECT_BYTES, self._token, self.stats)
        for log in logs:
            tail = max((n.released(log) for n in world.nodes.values() if n.up), default=0)
            cutoff = world.clock_ms() - TIER_AFTER_MS
            try:
                yield from offload_core.drop_trimmed(self.stats, log)
                yield from self._upload_steps(up, log, cutoff, tail)
            except (ObjectStoreError, LogstrandError) as exc:
                self.stats.failures += 1
                world.note(f"node {node.id} log {log}: not offloaded now: {exc}")
        old = world.now + 1_700_000_000 - ORPHAN_AGE_S
        for log in logs:
            with contextlib.suppress(ObjectStoreError):  # the next round sweeps
                yield from offload_core.sweep_log(self.stats, log, old)

    def _upload_steps(self, up: Uploader, log: int, cutoff: int, tail: int) -> Procedure:
        if self.world.config.break_tier_order:
            with _record_first():
                return (yield from offload_core.offload(up, log, cutoff, tail))
        return (yield from offload_core.offload(up, log, cutoff, tail))

    def _token(self) -> str:
        return f"{next(self.tokens):08x}"

    def _keep_less(self, node: SimNode) -> None:
        """The node's maintenance: local floors up to its local retention,
        never past the tiered point (``break_tier_floor``: past it)."""
        store = node.store
        assert store is not None
        estore = self.world.estore
        logs = list(self.world.config.log_ids)
        points = estore.tier_points(logs)
        if self.world.config.break_tier_floor:
            points = dict.fromkeys(logs, LSN_MAX)
        local = LocalRetention(
            points, dict.fromkeys(logs, self.world.config.local_retention_ms), {}
        )
        apply_maintenance(store, {}, {}, None, local)

    # the driver of a node's tier procedures (``SimNode._step`` hands these over)

    def perform(self, node: SimNode, cmd: Any, resume: Callable[..., None]) -> bool:
        """Perform one of the tier's commands for ``node``'s procedure and
        resume it later; False: not a tier command."""
        world = self.world
        match cmd:
            case StoreCall():
                self._later(world.rng.uniform(0.001, 0.01), resume, lambda: cmd.fn(world.estore))
            case ObjectCall():
                self._later(self.store.latency(), resume, lambda: self.store.call(cmd))
            case FindTime():
                self._later(0.005, resume, lambda: self._find_time(cmd))
            case OpenRead():
                node.reading = iter(self._read(cmd))
                world.at(0.005, resume)
            case NextItems():
                assert node.reading is not None
                chunk = [it for _, it in zip(range(ITEMS_PER_STEP), node.reading, strict=False)]
                world.at(0.001, resume, chunk)
            case _:
                return False
        return True

    def _later(self, delay: float, resume: Callable[..., None], fn: Callable[[], Any]) -> None:
        def now() -> None:
            try:
                value = fn()
            except Exception as exc:  # thrown into the procedure
                resume(None, exc)
            else:
                resume(value)

        self.world.at(delay, now)

    def _find_time(self, cmd: FindTime) -> int:
        """The client's ``find_time``: the least LSN any node answers."""
        world = self.world
        found = []
        for n in world.nodes.values():
            if n.up and n.store is not None:
                reply = n.store.find_time(wire.FindTime(0, cmd.log_id, cmd.timestamp_ms))
                if reply.lsn:
                    found.append(reply.lsn)
        if found:
            return min(found)
        return max(n.released(cmd.log_id) for n in world.nodes.values()) + 1

    def _read(self, cmd: OpenRead) -> Iterator[Any]:
        from . import checks

        items = checks.read(
            self.world, cmd.until, log=cmd.log_id, start=cmd.start, scd=True, partial=True
        )
        yield from items

    # the readers' way to the objects (``_tier_reads.TierReads``)

    def step(self, log: int, start: int, until: int) -> tuple[list[Any], int] | None:
        """Items from ``start`` below the tiered point and where the next
        step starts; None: past it."""
        point = self.world.estore.tier_points([log])[log]
        if start > min(point, until):
            return None
        self.reads["first"] += 1
        world = self.world
        up = [n for n in sorted(world.nodes) if world.nodes[n].up]
        for n in rendezvous_rank(log, dict.fromkeys(up, 1.0)):
            node = world.nodes[n]
            answers = self.answers.setdefault((n, node.incarnation), TierAnswers(1 << 16))
            msg = wire.TierRead(0, log, start, min(point, until), 4096)
            try:
                reply, _ = run_now(answers.answer(msg, world.now), self._perform_now)
            except ObjectStoreError:
                continue  # AGAIN: the reader asks another node
            if reply.next_lsn <= start:
                raise Violation(f"node {n} answered no progress from {start:#x}")
            return items_of(reply), reply.next_lsn
        raise _Unreadable(f"log {log}: no node could read its tiered records")

    def span(self, log: int, lo: int, hi: int) -> list[Any]:
        """The LSNs the nodes' floors left to the object store, all of them."""
        self.reads["span"] += 1
        out: list[Any] = []
        for _ in range(100_000):
            step = self.step(log, lo, hi)
            if step is None:  # as ``TierReads.span``: never a silent skip
                from logstrand.client import GapItem

                return [*out, GapItem(GapType.DATALOSS, lo, hi)]
            items, lo = step
            out += items
            if lo > hi:
                return out
        raise Violation("a tiered span never ended")

    def _perform_now(self, cmd: Any) -> Any:
        match cmd:
            case StoreCall():
                return cmd.fn(self.world.estore)
            case ObjectCall():
                return self.store.call(cmd)
            case AwaitAhead():
                return None
        raise AssertionError(cmd)


class _Unreadable(LogstrandError):
    def __init__(self, text: str) -> None:
        super().__init__(text, Status.AGAIN)


@contextlib.contextmanager
def _record_first() -> Iterator[None]:
    """``break_tier_order``: record a segment before its object is stored."""
    real = offload_core.upload

    def upload(
        up: Uploader,
        log: int,
        expect: int,
        entries: list[Entry],
        records: int,
        last_ts: int | None = None,
    ) -> Procedure:
        built = build(entries, records)
        key = f"logs/{log}/{built.lo:016x}-{built.hi:016x}-n{up.node_id}-{up.token()}"
        lo, hi, crc, size = built.lo, built.hi, built.crc, len(built.data)
        won = yield StoreCall(
            lambda s: s.record_tier_segment(log, expect, lo, hi, key, size, crc, records)
        )
        if not won:
            return None
        yield ObjectCall("put", (key, built.data))
        return hi

    offload_core.upload = upload
    try:
        yield
    finally:
        offload_core.upload = real


def check_tiered(world: World) -> dict[str, int]:
    """The tier's own promises (module docstring); the records' are in
    ``checks.check``, which knows of lost objects through ``world.tier``."""
    tier = world.tier
    assert tier is not None
    store = tier.store
    segments = floors = 0
    for log in world.config.log_ids:
        point, segs = world.estore.tier_state(log)
        for seg in segs:
            segments += 1
            key = str(seg[F.KEY])
            if key in store.lost:
                continue
            data = store.objects.get(key, (None, 0.0))[0]
            if data is None or len(data) != seg[F.BYTES]:
                raise Violation(f"log {log}: segment {key} names no whole object")
            if crc32c(data) != seg[F.CRC]:
                raise Violation(f"log {log}: object {key} does not match its recorded checksum")
        for node in world.nodes.values():
            floor = node.store.local_floor(log) if node.store is not None else 0
            if floor > point:
                raise Violation(f"node {node.id}: log {log}'s floor is past its tiered point")
            floors += floor > 0
    return {
        "segments": segments,
        "floors": floors,
        "read_first": tier.reads["first"],
        "read_span": tier.reads["span"],
        "tiered_records": tier.stats.records,
        "lost_races": tier.stats.lost_races,
        "orphans": tier.stats.orphans,
        **{f"store_{k}": v for k, v in store.stats.items()},
    }

"""Reading the simulated cluster with the production reader and holding the
outcome to the promises (``check``), and liveness during the run."""

from __future__ import annotations

import bisect
import random
from typing import TYPE_CHECKING, Any

import attrs

from logstrand import wire
from logstrand.client._committed_view import CommittedView
from logstrand.client._reader_core import (
    GapItem,
    GrantCredit,
    ReaderCore,
    RecordRun,
    StartStream,
)
from logstrand.client._reader_intake import Verdict, absorb
from logstrand.client._tier_reads import before_loss
from logstrand.errors import LogstrandError
from logstrand.records import CONTROL
from logstrand.storage import _rules as node_rules
from logstrand.storage._read_core import ReadFrom, ReadStreamCore, Report
from logstrand.types import GapType

from .config import LOG, Violation

if TYPE_CHECKING:
    from .node import SimNode
    from .tiering import SimTier
    from .txn_client import TxnTruth
    from .world import World


def read(
    world: World,
    until: int,
    *,
    log: int = LOG,
    scd: bool,
    down: tuple[int, ...] = (),
    answering: list[int] | None = None,
    partial: bool = False,
    empty: frozenset[int] = frozenset(),
    start: int = 0,
) -> list[Any]:
    """Read ``log`` from ``start`` with the real ReaderCore off the nodes'
    LogsDBs (and, for a tiered run, first below the tiered point and then
    the spans below the nodes' floors off the objects, as ``ReadStream``).

    ``down``: nodes the reader is told are down; nodes not ``answering``
    never answer (the reader finds out).  ``partial``: return what was
    delivered when the reader cannot go on (too few nodes to decide).
    ``empty``: nodes rebuilt empty (AUTHORITATIVE_EMPTY), as rebuilding says.
    """
    nodeset = tuple(sorted(world.nodes))
    tier = world.tier
    items: list[Any] = []
    rng = random.Random(world.seed * 7 + len(down))
    # Half the readers know of no tiered point when they open (as one that
    # read it before it moved): all they read of the objects is the spans
    # below the nodes' floors (``ReaderCore.take_tiered``).
    if tier is not None and rng.random() < 0.5:
        got = _tier_first(tier, log, start, until, partial, world.config.break_tier_loss)
        if got is None:
            return items
        items, start = got
        if start > until:
            return items
    core = ReaderCore(log, start, until, nodeset, world.config.replication, scd=scd, credit=64)
    answering = list(nodeset) if answering is None else answering
    streams = {n: _ReadEndpoint(world.nodes[n], log) for n in answering}
    core.set_authority(empty, frozenset())
    for n in down:
        core.on_unreachable(n, 0.0)
    for n in nodeset:
        if n not in streams:
            core.on_unreachable(n, 0.0)
    now = 0.0
    for _ in range(200_000):
        core.poll(now)
        taken, actions = core.take()
        items += taken
        span = core.take_tiered()
        if span is not None:
            assert tier is not None, "a floor on a log that is not tiered"
            try:
                items += tier.span(log, *span)
            except LogstrandError:
                if partial:
                    return items
                raise
            continue
        for a in actions:
            if a.node_id in streams:
                streams[a.node_id].act(a)
        if core.done:
            return items
        order = list(streams.values())
        rng.shuffle(order)
        if not any(s.pump(core, now) for s in order):
            if partial and now > 10.0:
                return items
            now += 1.0
    if partial:
        return items
    raise Violation(f"reader made no progress (healthy={core.healthy})")


def _tier_first(
    tier: SimTier, log: int, start: int, until: int, partial: bool, deliver_loss: bool
) -> tuple[list[Any], int] | None:
    """What is below the tiered point, off the objects (``ReadStream._tiered``);
    None: the objects cannot be read now (a partial read ends there)."""
    items: list[Any] = []
    try:
        for _ in range(100_000):
            step = tier.step(log, start, until)
            if step is None:
                return items, start
            got, start = step
            # A lost object: the nodes' streams read on from its gap (they
            # may hold its records), as ``TierReads.first`` has them.
            got, loss = (got, None) if deliver_loss else before_loss(got)
            items += got
            if loss is not None:
                return items, loss.lo
            if start > until:
                return items, start
    except LogstrandError:
        if partial:
            return None
        raise
    raise Violation("the tiered records never ended")


def check(world: World) -> dict[str, Any]:
    """Hold the run to the promises, log by log; raise Violation if one breaks."""
    attempted: set[bytes] = set()
    acked: dict[int, dict[bytes, int]] = {log: {} for log in world.config.log_ids}
    for client in world.clients.values():
        attempted |= client.attempted
        for payload, lsn in client.acked.items():
            acked[client.log_of[payload]][payload] = lsn
    totals: dict[str, int] = {"acked": 0, "records": 0, "gaps": 0, "epochs": 0}
    for log in world.config.log_ids:
        try:
            one = _check_log(world, log, acked[log], attempted)
        except Violation as exc:
            raise Violation(f"log {log}: {exc}" if world.config.logs > 1 else str(exc)) from None
        for name, n in one.items():
            totals[name] += n
    return {
        **totals,
        "snapshots": len(world.snapshots),
        **world.stats,
    }


def _check_log(
    world: World, log: int, acked: dict[bytes, int], attempted: set[bytes]
) -> dict[str, int]:
    issued: list[tuple[float, float, int]] = []  # (sent, acked, lsn)
    for client in world.clients.values():
        issued += client.history[log]
    until = max(acked.values())
    readers = [
        read(world, until, log=log, scd=True),
        read(world, until, log=log, scd=False),
        read(world, until, log=log, scd=True, down=(world.rng.choice(sorted(world.nodes)),)),
    ]
    flat = [flatten(items) for items in readers]
    if world.tier is not None:
        flat = _agree_tiered(world, log, flat, acked, attempted)
    for other in flat[1:]:
        if other != flat[0]:
            diff = next(i for i, (a, b) in enumerate(zip(flat[0], other, strict=False)) if a != b)
            raise Violation(
                f"readers disagree at item {diff}: {flat[0][diff : diff + 3]} vs "
                f"{other[diff : diff + 3]}"
            )
    items = flat[0]
    if world.config.transactions:
        check_committed(world, log, readers[0], final=True)
    # Timestamps never go back in the log.
    stamps = [
        (lsn, t)
        for it in readers[0]
        if isinstance(it, RecordRun)
        for lsn, t in zip(it.lsns, it.timestamps_ms, strict=True)
    ]
    back = next((i for i in range(1, len(stamps)) if stamps[i][1] < stamps[i - 1][1]), None)
    if back is not None:
        (a, ta), (b, tb) = stamps[back - 1], stamps[back]
        raise Violation(f"timestamp of {b:#x} ({tb}) is before that of {a:#x} ({ta})")
    if world.tier is None:
        seen = _delivered(world, log, items, acked, attempted)
    else:  # each reader was held to the promises; ``items`` are the records agreed on
        seen = {p: lo for kind, lo, _, p in items if kind == "record" and p is not None}
    # An append acknowledged before another was sent has the lower LSN.
    issued.sort(key=lambda x: x[1])
    acked_before = 0
    by_sent = sorted(issued)
    i = 0
    for sent, _, lsn in by_sent:
        while i < len(issued) and issued[i][1] < sent:
            acked_before = max(acked_before, issued[i][2])
            i += 1
        if lsn <= acked_before:
            raise Violation(f"append sent at {sent:.4f} got {lsn:#x} <= {acked_before:#x}")
    # Whatever a reader was handed during the run is what the log says in the end.
    final = {lo: payload for kind, lo, _, payload in items if kind == "record"}
    records = sorted(final)
    for k, (of, snap) in enumerate(world.snapshots):
        if of != log:
            continue
        for kind, lo, hi, payload in snap:
            if lo > until:
                break
            if world.tier is not None and world.tier.store.lost_at(lo):
                continue  # read before its object was lost
            if kind == "record":
                if final.get(lo) != payload:
                    raise Violation(
                        f"reader {k} got {payload!r} at {lo:#x}; in the end it is {final.get(lo)!r}"
                    )
            else:
                i = bisect.bisect_left(records, lo)
                if i < len(records) and records[i] <= hi:
                    raise Violation(
                        f"reader {k} got a {kind} gap {lo:#x}..{hi:#x}; in the end "
                        f"{records[i]:#x} is a record"
                    )
    return {
        "acked": len(acked),
        "records": len(seen),
        "gaps": sum(1 for k, *_ in items if k != "record"),
        "epochs": world.estore.log_epochs(log).next_epoch - 1,
    }


def _delivered(
    world: World,
    log: int,
    items: list[tuple[str, int, int, bytes | None]],
    acked: dict[bytes, int],
    attempted: set[bytes],
) -> dict[bytes, int]:
    """Hold one reader's items to the promises: in LSN order, each payload
    once and appended, gaps HOLE or BRIDGE (or DATALOSS over a lost
    object's LSNs that a node's floor gave up), every acknowledged record
    at its LSN (or under such a gap).  Returns where each payload was."""
    seen: dict[bytes, int] = {}
    lost: list[tuple[int, int]] = []
    last = 0
    for kind, lo, hi, payload in items:
        if lo <= last:
            raise Violation(f"LSN {lo:#x} delivered after {last:#x}")
        last = hi
        if kind == "record":
            assert payload is not None
            if payload in seen:
                raise Violation(f"{payload!r} at {seen[payload]:#x} and again at {lo:#x}")
            if payload not in attempted:
                raise Violation(f"{payload!r} at {lo:#x} was never appended")
            seen[payload] = lo
        elif kind == GapType.DATALOSS.name and _lost_all(world, lo, hi):
            # Over an object the store lost (said, not skipped), and only
            # where a node's floor says it keeps no copy: else the nodes'
            # streams read it.
            if hi > max(_floors(world, log), default=0):
                raise Violation(f"DATALOSS gap {lo:#x}..{hi:#x} over copies nodes keep")
            lost.append((lo, hi))
        elif kind not in (GapType.HOLE.name, GapType.BRIDGE.name):
            raise Violation(f"{kind} gap {lo:#x}..{hi:#x}")
    for payload, lsn in acked.items():
        if payload not in seen and any(lo <= lsn <= hi for lo, hi in lost):
            continue
        if seen.get(payload) != lsn:
            where = seen.get(payload)
            raise Violation(
                f"acknowledged {payload!r} at {lsn:#x} is "
                + ("missing" if where is None else f"at {where:#x}")
            )
    return seen


def _agree_tiered(
    world: World,
    log: int,
    flat: list[list[tuple[str, int, int, bytes | None]]],
    acked: dict[bytes, int],
    attempted: set[bytes],
) -> list[list[tuple[str, int, int, bytes | None]]]:
    """What readers of a tiered log must agree on, each held to the
    promises first (``_delivered``): their records, but those of a lost
    object.  There a reader that a node's floor sent to the objects first
    gets the gap, and one that met a node still holding the records first
    gets them: both are told the truth, neither is shown a hole.  Gaps
    may be cut differently around them, and an object keeps the gaps its
    offload's read met, cut where that read ended."""
    for items in flat:
        _delivered(world, log, items, acked, attempted)
    tier = world.tier
    assert tier is not None
    return [
        [x for x in f if x[0] == "record" and not tier.store.lost_at(x[1])]
        for f in (merge_gaps(f) for f in flat)
    ]


def check_committed(world: World, log: int, items: list[Any], *, final: bool) -> None:
    """What a committed reader (the production ``CommittedView``) delivers
    of ``items``, a read of ``log`` from its start: never a record of a
    transaction that aborted or is still open; and, in the end (``final``,
    every transaction decided), every record of every committed transaction
    and every acknowledged record outside transactions.  (During the run a
    committed transaction may show in part: a reader stops at the first
    record of the oldest transaction still open, which may come between a
    committed one's records, as Kafka's consumers stop at the LSO.)"""
    view = CommittedView(0, hold_max_bytes=1 << 62)
    out = view.feed(items)
    view.at_end()
    delivered = [p for kind, _, _, p in flatten(out) if kind == "record"]
    txn_of: dict[bytes, TxnTruth] = {}
    plain: set[bytes] = set()
    for client in world.clients.values():
        txn_of.update(getattr(client, "txn_of", {}))
        plain.update(p for p in client.acked if client.log_of[p] == log)
    plain -= txn_of.keys()
    got = set(delivered)
    for payload in delivered:
        txn = None if payload is None else txn_of.get(payload)
        if txn is not None and txn.outcome != "commit":
            when = "in the end" if final else f"at {world.now:.3f}"
            raise Violation(
                f"log {log} {when}: a committed reader got {payload!r} of transaction "
                f"{txn.producer_id}/{txn.epoch}, which is {txn.outcome or 'open'}"
            )
    for txn in world.txns:
        mine = txn.payloads.get(log, set())
        if txn.outcome != "commit" or not mine:
            continue
        seen = mine & got
        if final and seen != mine:
            raise Violation(
                f"log {log} in the end: a committed reader got {len(seen)} of the {len(mine)} "
                f"records of committed transaction {txn.producer_id}/{txn.epoch}: missing "
                f"{sorted(mine - seen)[:3]}"
            )
    if final and plain - got:
        raise Violation(f"a committed reader misses acknowledged {sorted(plain - got)[:3]}")


def _lost_all(world: World, lo: int, hi: int) -> bool:
    """Does a DATALOSS gap lo..hi cover only LSNs of objects the store lost?
    (A gap starts at the LSN a reader asked for and ends at its object's
    last: its first LSN is what must be in a lost object.)"""
    return world.tier is not None and world.tier.store.lost_at(lo)


def _floors(world: World, log: int) -> list[int]:
    return [n.store.local_floor(log) for n in world.nodes.values() if n.store is not None]


def unconfirmed_logs(world: World) -> list[int]:
    """The logs with acknowledged records no reader has seen yet (always the
    first log, so a run of one log reads it at every snapshot)."""
    logs = {LOG}
    for client in world.clients.values():
        for payload in client.acked_at:
            if payload not in world.confirmed:
                logs.add(client.log_of[payload])
    return sorted(logs)


def check_liveness(world: World, got: set[bytes], read_logs: set[int]) -> None:
    """Every acknowledged record is readable ``liveness_s`` after it was
    acknowledged, once the faults allow it: enough nodes up, none paused,
    for that long.  Faults may go on meanwhile (a node crashing while
    enough others stay up, a node coming back, lost and late messages).

    ``got``: what this snapshot read of ``read_logs``; a record of another
    log must have been read by an earlier one (``world.confirmed``).
    """
    world.confirmed |= got
    since = world.serviceable_since
    if since is None:
        return
    bound = world.config.liveness_s
    for client in world.clients.values():
        for payload, acked_at in client.acked_at.items():
            if payload in world.excused:
                continue
            if world.tier is not None and world.tier.store.lost_at(client.acked[payload]):
                continue  # its object is lost: a DATALOSS gap, checked in the end
            if payload in (got if client.log_of[payload] in read_logs else world.confirmed):
                continue
            if world.now - max(acked_at, since) > bound:
                raise Violation(
                    f"liveness: {payload!r}, acknowledged at {acked_at:.3f} as "
                    f"{client.acked[payload]:#x}, is not readable at {world.now:.3f}, "
                    f"with enough nodes up since {since:.3f}"
                )
    world.liveness_checks += 1


def flatten(items: list[Any]) -> list[tuple[str, int, int, bytes | None]]:
    """Records and gaps as (kind, lo, hi, payload); transactions' markers
    are no records (a reader never delivers them)."""
    out: list[tuple[str, int, int, bytes | None]] = []
    for it in items:
        if isinstance(it, RecordRun) and it.txn_flags & CONTROL:
            continue
        if isinstance(it, RecordRun):
            out += [("record", lsn, lsn, p) for lsn, p in zip(it.lsns, it.payloads, strict=True)]
        elif isinstance(it, GapItem):
            out.append((it.type.name, it.lo, it.hi, None))
    return out


def merge_gaps(
    flat: list[tuple[str, int, int, bytes | None]],
) -> list[tuple[str, int, int, bytes | None]]:
    """``flat`` with each run of adjacent gaps of one kind made one gap."""
    out: list[tuple[str, int, int, bytes | None]] = []
    for item in flat:
        kind, lo, hi, _ = item
        if out and kind != "record" and out[-1][0] == kind and out[-1][2] + 1 == lo:
            out[-1] = (kind, out[-1][1], hi, None)
        else:
            out.append(item)
    return out


class _ReadEndpoint:
    """A node's read stream: the production ``ReadStreamCore`` over the node's
    LogsDB and its serving rule, as the node's shell drives them."""

    #: Records a node sends in one step at most (smaller than a real node's
    #: batches, so that the streams of several nodes interleave).
    STEP_RECORDS = 16

    def __init__(self, node: SimNode, log: int) -> None:
        self.node = node
        self.log = log
        self.stream: StartStream | None = None
        self.core: ReadStreamCore | None = None
        self.release = node.released(log)

    def act(self, action: Any) -> None:
        if isinstance(action, StartStream):
            self.stream = action
            self.core = ReadStreamCore(
                self.node.id,
                action.start_lsn,
                action.until_lsn,
                action.credit,
                scd=action.scd,
                known_down=action.known_down,
            )
        elif (
            isinstance(action, GrantCredit)
            and self.stream is not None
            and self.core is not None
            and self.stream.generation == action.generation
        ):
            self.core.add_credit(action.records)

    def pump(self, reader: ReaderCore, now: float) -> bool:
        s, core, store = self.stream, self.core, self.node.store
        if s is None or core is None or store is None:
            return False
        step = core.step(self.release)
        if isinstance(step, Report):
            msg = wire.ReadRecords(0, s.generation, 0, step.next_lsn, store.trim_point(self.log))
            msg = attrs.evolve(
                msg,
                clean_point=store.clean_point(self.log),
                local_floor=store.local_floor(self.log),
            )
            self._deliver(reader, msg, now)
            core.sent(step.next_lsn)
            return True
        if not isinstance(step, ReadFrom):
            return False  # idle, out of credit, or finished
        # The node's own rules: the trim window, then what it may serve at all.
        got, items = store.read_windows(
            self.log, step, core, max_records=min(step.max_records, self.STEP_RECORDS)
        )
        estore = self.node.world.estore
        items = node_rules.servable_windows(
            items, self.release, lambda e: estore.epoch_end(self.log, e)
        )
        out = core.on_read(items, got.scanned_to)
        msg = wire.ReadRecords(
            0,
            s.generation,
            0,
            out.next_lsn,
            store.trim_point(self.log),
            out.batches,
            out.windows,
            clean_point=store.clean_point(self.log),
            local_floor=store.local_floor(self.log),
        )
        self._deliver(reader, msg, now)
        core.sent(out.next_lsn)
        return True

    def _deliver(self, reader: ReaderCore, msg: wire.ReadRecords, now: float) -> None:
        # Through the client's own intake: checksums, statuses, windows.
        assert absorb(reader, self.node.id, msg, now) is Verdict.TAKEN

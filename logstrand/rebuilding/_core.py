"""The decisions of rebuilding, pure (no I/O): how the rebuilding state
changes, which donor leads each copy, where a new copy goes, how copysets are
amended, and what a node that starts makes of its data directory.

Rules:

1. One run at a time, for every node being rebuilt or drained.  A change of
   that set starts a new run: donors start over (their progress belongs to a
   run id).
2. The donors are every storage node but those being rebuilt or already
   emptied; a node being drained is a donor too (it has its data).
3. For a stored batch whose copyset names a node of the run, the leader is
   the first node of the copyset that is a donor.  Only the leader acts, so
   each batch is re-created once however many donors hold it.
4. The new copies replace the run's nodes in the copyset, on nodes of the
   batch's nodeset chosen by weight, outside the copyset, outside every node
   that takes no writes, and in failure domains the kept copies do not use
   while there are such domains.  The other holders are told the new copyset.
5. A run is authoritative when fewer nodes are lost (rebuilt, not drained)
   than the smallest replication factor: then every record kept a copy on a
   donor.  It ends AUTHORITATIVE_EMPTY when every donor reported done;
   otherwise UNDERREPLICATION, until an operator marks the node
   unrecoverable.
6. A node that starts with its data (its marker matches the one the epoch
   store recorded) aborts a rebuilding of itself; one that starts without
   (no marker, or another one) is rebuilt, unless it already was.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import attrs

from ..errors import InvalidArgumentError, NotFoundError
from ._model import DonorProgress, Mode, RebuildingState, Run, Shard, StorageState

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

E = StorageState


# -- the state ---------------------------------------------------------------------


def _new_run(
    st: RebuildingState, storage: Iterable[int], replication_min: int, now_ms: int
) -> RebuildingState:
    """Rule 1: a run for every shard in progress (or none)."""
    active = sorted(n for n, s in st.shards.items() if s.in_progress)
    if not active:
        return attrs.evolve(st, run=None)
    gone = {n for n, s in st.shards.items() if not (s.mode is Mode.DRAIN and s.in_progress)}
    donors = tuple(sorted(n for n in storage if n not in gone))
    lost = {
        n
        for n, s in st.shards.items()
        if s.mode is Mode.REBUILD and s.state in (E.REBUILDING, E.UNDERREPLICATION)
    }
    run = Run(st.next_run, tuple(active), donors, now_ms, len(lost) < replication_min)
    return attrs.evolve(st, run=run, next_run=st.next_run + 1)


def request(
    st: RebuildingState,
    node_id: int,
    mode: Mode,
    reason: str,
    *,
    storage: Iterable[int],
    replication_min: int,
    now_ms: int,
) -> RebuildingState:
    """Start rebuilding (or draining) ``node_id``.  Asking again is a no-op;
    a rebuild of a node being drained turns the drain into a rebuild (it died)."""
    old = st.shards.get(node_id)
    if old is not None and old.in_progress and (old.mode is mode or mode is Mode.DRAIN):
        return st
    if old is not None and old.state is E.AUTHORITATIVE_EMPTY and mode is Mode.DRAIN:
        return st  # drained already (or rebuilt: nothing left to move)
    shards = dict(st.shards)
    shards[node_id] = Shard(node_id, mode, E.REBUILDING, now_ms, reason)
    return _new_run(attrs.evolve(st, shards=shards), storage, replication_min, now_ms)


def remove_shard(
    st: RebuildingState,
    node_id: int,
    *,
    storage: Iterable[int],
    replication_min: int,
    now_ms: int,
) -> RebuildingState:
    """Back in service: an abort (the node came back with its data), an
    undrain, or a rebuilt node that acknowledges it (rule 6)."""
    if node_id not in st.shards:
        return st
    shards = dict(st.shards)
    was = shards.pop(node_id)
    st = attrs.evolve(st, shards=shards)
    if was.in_progress or (st.run is not None and node_id in st.run.donors):
        return _new_run(st, storage, replication_min, now_ms)
    return st


def mark_unrecoverable(st: RebuildingState, node_id: int) -> RebuildingState:
    """An operator says the node's lost copies will not come back."""
    shard = st.shards.get(node_id)
    if shard is None or shard.mode is not Mode.REBUILD:
        raise NotFoundError(f"node {node_id} is not being rebuilt")
    shards = dict(st.shards)
    state = E.AUTHORITATIVE_EMPTY if shard.state is E.UNDERREPLICATION else shard.state
    shards[node_id] = attrs.evolve(shard, unrecoverable=True, state=state)
    return attrs.evolve(st, shards=shards)


def finish(
    st: RebuildingState, run_id: int, progress: Mapping[int, DonorProgress], now_ms: int
) -> RebuildingState:
    """Rule 5: end the run if every donor reported done (else unchanged)."""
    run = st.run
    if run is None or run.id != run_id:
        return st
    if not all(progress.get(d, DonorProgress()).done for d in run.donors):
        return st
    shards = dict(st.shards)
    for n in run.nodes:
        shard = shards.get(n)
        if shard is None or not shard.in_progress:
            continue
        ok = run.authoritative or shard.unrecoverable or shard.mode is Mode.DRAIN
        shards[n] = attrs.evolve(shard, state=E.AUTHORITATIVE_EMPTY if ok else E.UNDERREPLICATION)
    last = {
        "id": run.id,
        "nodes": list(run.nodes),
        "authoritative": run.authoritative,
        "started_ms": run.started_ms,
        "duration_ms": max(0, now_ms - run.started_ms),
        "records": sum(p.records for p in progress.values()),
        "bytes": sum(p.bytes for p in progress.values()),
        "short": sum(p.short for p in progress.values()),
    }
    return attrs.evolve(st, shards=shards, run=None, last=last)


def removable(st: RebuildingState, node_id: int) -> str | None:
    """Why ``nodes remove`` must refuse ``node_id`` (None: it may go)."""
    shard = st.shards.get(node_id)
    if shard is None:
        return f"node {node_id} is not drained: run 'logstrand drain {node_id} --wait' first"
    if shard.state is not E.AUTHORITATIVE_EMPTY:
        return f"node {node_id} is {shard.state.value}: wait until its rebuilding ends"
    return None


def set_grace(st: RebuildingState, grace_ms: int | None) -> RebuildingState:
    if grace_ms is not None and grace_ms <= 0:
        raise InvalidArgumentError("the rebuild grace period must be positive")
    return attrs.evolve(st, grace_ms=grace_ms)


def due_for_grace(st: RebuildingState, dead_since_ms: Mapping[int, int], now_ms: int) -> list[int]:
    """The nodes dead longer than the grace period and not rebuilt yet."""
    if st.grace_ms is None:
        return []
    return sorted(
        n
        for n, since in dead_since_ms.items()
        if now_ms - since >= st.grace_ms and n not in st.shards
    )


# -- a node that starts ---------------------------------------------------------------


class Start:
    """What a starting node does about its data directory (rule 6)."""

    NORMAL = "normal"  # in service as it was
    FIRST = "first"  # a new node: record its marker
    WIPED = "wiped"  # lost its data: record the new marker, rebuild it
    ABORT = "abort"  # came back with its data during its rebuilding
    ACK = "ack"  # rebuilt while away: back in service (its copies moved)


def on_start(st: RebuildingState, node_id: int, marker: str | None) -> str:
    """``marker``: what the node's data directory holds (None: nothing).  The
    epoch store keeps the marker of a wiped node's lost data until its
    rebuilding is acknowledged, so a restart during that rebuilding is not
    taken for the data coming back."""
    held = st.held.get(node_id)
    shard = st.shards.get(node_id)
    if held is None:
        return Start.FIRST
    rebuilt = shard is not None and shard.mode is Mode.REBUILD
    empty = shard is not None and shard.state is E.AUTHORITATIVE_EMPTY
    if marker != held:
        if rebuilt and empty:
            return Start.ACK
        return Start.NORMAL if rebuilt else Start.WIPED
    if rebuilt:
        return Start.ACK if empty else Start.ABORT
    return Start.NORMAL


# -- donors ------------------------------------------------------------------------------


@attrs.frozen
class NewCopies:
    """A leader's work for one stored batch."""

    #: Nodes to STORE a new copy on (may be fewer than lost: see ``short``).
    recipients: tuple[int, ...]
    #: The copyset after: the kept copies, then the new ones.
    copyset: tuple[int, ...]
    #: Holders of kept copies other than the leader: told the new copyset.
    amend: tuple[int, ...]
    #: Copies that found no node to go to.
    short: int


def leader(copyset: tuple[int, ...], run: Run) -> int | None:
    """Rule 3: who re-creates a batch with this copyset (None: it needs nothing)."""
    if not any(n in run.nodes for n in copyset):
        return None
    for n in copyset:
        if n in run.donors and n not in run.nodes:
            return n
    for n in copyset:  # only drained nodes hold it
        if n in run.donors:
            return n
    return None


def new_copies(
    copyset: tuple[int, ...],
    run: Run,
    me: int,
    nodeset: Collection[int],
    *,
    no_writes: Collection[int] = (),
    avoid: Collection[int] = (),
    weights: Mapping[int, float] | None = None,
    domains: Mapping[int, str] | None = None,
    rng: random.Random | None = None,
) -> NewCopies | None:
    """Rule 4: where ``me``'s batch with ``copyset`` gets its new copies
    (None: ``me`` does not lead it).  ``avoid``: nodes that failed lately."""
    if leader(copyset, run) != me:
        return None
    rng = rng or random.Random()
    weights = weights or {}
    domains = domains or {}
    keep = tuple(n for n in copyset if n not in run.nodes)
    need = len(copyset) - len(keep)
    taken = set(copyset) | set(run.nodes) | set(no_writes) | set(avoid)
    candidates = [n for n in sorted(nodeset) if n not in taken and weights.get(n, 1.0) > 0]
    used = {domains.get(n, f"node{n}") for n in keep}
    picked: list[int] = []
    while len(picked) < need and candidates:
        fresh = [n for n in candidates if domains.get(n, f"node{n}") not in used]
        pool = fresh or candidates
        total = sum(weights.get(n, 1.0) for n in pool)
        x = rng.random() * total
        choice = pool[-1]
        for n in pool:
            x -= weights.get(n, 1.0)
            if x < 0:
                choice = n
                break
        picked.append(choice)
        used.add(domains.get(choice, f"node{choice}"))
        candidates.remove(choice)
    amend = tuple(n for n in keep if n != me)
    return NewCopies(tuple(picked), keep + tuple(picked), amend, need - len(picked))


def hold(st: RebuildingState, node_id: int, marker: str) -> RebuildingState:
    """Record the marker of a node's data directory (rule 6)."""
    if st.held.get(node_id) == marker:
        return st
    return attrs.evolve(st, held={**st.held, node_id: marker})

"""Sealing and recovery as sans-I/O procedures: generators that yield commands.

Theory of operation
-------------------
Activating a sequencer and recovering the epochs before it is a conversation
with many nodes and the epoch store: seal, ask, gather digests, write plugs,
retry.  The steps and their rules live here, once, as generator functions.
They never do I/O themselves: each ``yield`` hands the driver a command
(``Ask`` some nodes, ``Tell`` one, ``StoreCopies`` on a copyset, call the
``EpochStore``, ``Sleep``) and the driver sends back the result (or throws
the exception the call raised).

Two drivers run them: the node's trio shell (``storage/_procedures.py``),
over real connections, and the seeded simulation (``tests/sim``), over a
simulated network that drops, delays, duplicates and reorders messages, with
nodes that crash and restart.  So the simulation checks the very code that
production runs.

Rules the procedures keep:

1. A sequencer of epoch E seals every earlier epoch on an f-majority of the
   nodeset of each (``|nodeset| - R + 1`` nodes) before it takes appends:
   the nodes left unsealed are fewer than R, so no older wave can be
   acknowledged any more.
2. Recovery of epoch e trusts as known good only what some node was told is
   released (release pointers only ever cover fully stored records of
   recovered epochs); everything above is decided from an f-majority of
   complete digests (``EpochRecovery``).
3. Every decision is written to R nodes as a recovery STORE carrying E
   (``recovery_seal``); a node refuses it when a newer sequencer sealed it,
   and the recovery then stops: the newer sequencer redoes it.
4. Every digest comes from a node sealed by this recovery first (GET_DIGEST
   seals), so nothing older can land on a node after it answered.
5. Once its decisions are stored, the recovery records the epoch's end in
   the epoch store (``EpochEnd``: the LNG, the bridge, its seal; a higher seal
   wins) and only then releases past the epoch.  Nodes hand readers only the
   copies that end says are good: a node that missed the recovery keeps
   copies left by the dead sequencer, or by an earlier recovery that died,
   and must not serve them.
6. Epoch e is marked clean (LCE) only after all that, and after the table
   of idempotent producers up to e is in the epoch store
   (``_idempotence``); the caller releases epoch E's own records, and takes
   its idempotent appends, only after every earlier epoch is clean.
7. A recovery never gives up while its sequencer stands: it completes as soon
   as R nodes of the nodeset take its copies and an f-majority answers for
   its digest.  A failed attempt is retried after a pause that starts well
   under a second, and each attempt asks afresh which nodes are alive.
8. Before epoch e is marked clean, where epoch e + 1's Kafka offsets start
   is in the epoch store: e's base plus the ESNs below its bridge (the first
   recovery to get there records it; any later one would decide the same
   bridge).  Offsets are then dense within an epoch and across epochs, and
   known for an epoch once the epochs before it are clean, which is also
   when its records are released (``logstrand.kafka._offsets``).
"""

from __future__ import annotations

import contextlib
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from ..epochstore._model import EpochEnd, LogEpochs
from ..errors import LogstrandError, PreemptedError, StaleError, Status
from ..idempotence._recovery import Entry, digest_entries, in_epoch, kept, sealed_entries
from ..types import compose_lsn, lsn_epoch, lsn_esn
from ..wire import Digest, GetDigest, LogInfo, LogInfoReply, Release, Seal, SealReply
from ._commands import (
    Ask,
    Command,
    EpochStoreCall,
    Procedure,
    Sleep,
    StoreCopies,
    Tell,
)
from ._decisions import write_decisions
from ._recovery import (
    NO_STANDING,
    Decision,
    DigestRecord,
    EpochRecovery,
    Standing,
    quorum,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Container, Mapping

    from ..epochstore._base import EpochStore, Placement
    from ..epochstore._model import EpochMetadata
    from ..idempotence import Producers
    from ..placement import CopysetSelector

__all__ = ["Ask", "Command", "EpochStoreCall", "Procedure", "Sleep", "StoreCopies", "Tell"]

_log = logging.getLogger("logstrand.recovery")

DIGEST_ROUNDS_MAX = 1000
#: A failed recovery attempt is tried again after this pause, doubling up to
#: ``RETRY_MAX_S``: soon enough that a node that just came back (or a
#: membership that just caught up) is used at once.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0


def set_clean(log_id: int, epoch: int, producers: Producers, store: EpochStore) -> int:
    """The producers up to ``epoch`` first, and where the next epoch's Kafka
    offsets start, then ``epoch`` clean (rules 6 and 8)."""
    store.set_producer_snapshot(log_id, epoch, producers)
    end = store.epoch_end(log_id, epoch)
    if end is not None and end.bridge_esn > 1:
        bases = store.offset_bases(log_id)
        base = next((b for e, b in reversed(bases) if e <= epoch), 0)
        store.set_offset_base(log_id, epoch + 1, base + end.bridge_esn - 1)
    return store.set_last_clean_epoch(log_id, epoch)


def _standing(store: EpochStore) -> Standing:
    """Rebuilding's status of the nodes, as every quorum counts it now; read
    in the same ``EpochStoreCall`` as what a step reads anyway."""
    authority = store.rebuilding_state().authority()
    return Standing(frozenset(authority.empty), frozenset(authority.untrusted))


def _oks(replies: Mapping[int, Any]) -> set[int]:
    return {n for n, r in replies.items() if getattr(r, "status", None) == Status.OK}


# -- sealing -------------------------------------------------------------------


def activate(
    log_id: int, placement: Placement, seal_timeout_s: float, clock_ms: Callable[[], int]
) -> Procedure:
    """Take the log's next epoch and seal the earlier ones.

    Returns ``(epoch, metadata, history, start_ms, entries)``: the new
    epoch, its placement, every placement the log ever had (recovery reads
    the older ones), the timestamp the new sequencer stamps from (the later
    of its clock and the newest timestamp the sealed nodes hold, recorded in
    the epoch store before any append: ``set_epoch_start``), and the sealed
    nodes' producer entries (which recovery sifts: ``_idempotence``), None
    when nothing was sealed.

    Nothing is sealed in a log's first epoch, nor when every earlier epoch
    is clean and the last was ended by its own sequencer as its node
    stopped (``_handoff``): that sequencer took its last append before it
    recorded the end, so no older wave can be acknowledged any more, the
    end carries its newest stamp, and the producers are in the epoch store
    with the clean mark.  A node restarted with thousands of active logs
    then costs each log's next sequencer no message at all before it takes
    appends (it cost a SEAL to every node of the nodeset, each answered
    after an fsync).
    """

    # One call, so one transaction and one worker-thread hop of the node's
    # grouped epoch-store calls: the new epoch with what the seal needs.
    def take(s: EpochStore) -> tuple[Any, ...]:
        epoch, meta = s.take_epoch(log_id, placement)
        end = s.epoch_end(log_id, epoch - 1) if epoch > 1 else None
        return epoch, meta, s.log_epochs(log_id), _standing(s), s.last_clean_epoch(log_id), end

    epoch, meta, state, standing, lce, end = yield EpochStoreCall(take)
    history = list(state.history)
    if epoch > 1 and lce >= epoch - 1 and end is not None and end.last_timestamp_ms > 0:
        start = max(end.last_timestamp_ms, clock_ms())
        yield EpochStoreCall(lambda s: s.set_epoch_start(log_id, epoch, start))
        return epoch, meta, history, start, None
    earlier = [h for h in history if h.since < epoch]
    replies = yield from seal_earlier(log_id, epoch, earlier, seal_timeout_s, standing)
    last_ts = max((r.last_timestamp_ms for r in replies.values()), default=0)
    start = max(last_ts, clock_ms())
    if epoch > 1:
        yield EpochStoreCall(lambda s: s.set_epoch_start(log_id, epoch, start))
    return epoch, meta, history, start, sealed_entries(replies) if replies else None


def seal_earlier(
    log_id: int,
    epoch: int,
    earlier: list[EpochMetadata],
    timeout_s: float,
    standing: Standing = NO_STANDING,
) -> Procedure:
    """Seal the log up to ``epoch - 1`` on a ``quorum`` of every earlier nodeset.

    Returns the replies of the sealed nodes: they meet every copyset, so no
    acknowledged record is newer than the newest timestamp they hold, nor
    missing from their producer tables.

    Raises:
        LogstrandError: NOSEQUENCER when too few nodes answered in time.
    """
    if epoch <= 1 or not earlier:
        return {}
    targets = sorted({n for h in earlier for n in h.nodeset})

    def sealed(replies: Mapping[int, Any]) -> set[int]:
        return {n for n, r in replies.items() if isinstance(r, SealReply) and r.status == Status.OK}

    def enough(replies: Mapping[int, Any]) -> bool:
        done = sealed(replies)
        return all(quorum(h.nodeset, h.replication_factor, done, standing) for h in earlier)

    replies = yield Ask(tuple((n, Seal(0, log_id, epoch - 1)) for n in targets), timeout_s, enough)
    if not enough(replies):
        raise LogstrandError(
            f"log {log_id}: only nodes {sorted(sealed(replies))} sealed epoch {epoch - 1}",
            Status.NOSEQUENCER,
        )
    return {n: replies[n] for n in sealed(replies)}


def rebroadcast_release(log_id: int, nodeset: tuple[int, ...], timeout_s: float) -> Procedure:
    """Bring every node of the nodeset to the highest release pointer any has.

    RELEASEs are sent once and kept in memory; a node that restarted, or missed
    the last one, would otherwise hold readers back.
    """
    # Best effort: the nodes that answer soon enough.
    asks = tuple((n, LogInfo(0, log_id)) for n in nodeset)
    replies = yield Ask(asks, timeout_s, lambda r: bool(_oks(r)), settle_s=0.1)
    best = max((r.release_lsn for r in replies.values() if isinstance(r, LogInfoReply)), default=0)
    if best:
        for n in nodeset:
            yield Tell(n, Release(log_id, best))


# -- recovery ------------------------------------------------------------------


def recover(
    log_id: int,
    epoch: int,
    history: list[EpochMetadata],
    make_selector: Callable[[EpochMetadata], CopysetSelector],
    alive: Callable[[], Container[int]],
    stamp_cap_ms: int,
    *,
    ask_timeout_s: float = 2.0,
    digest_timeout_s: float = 5.0,
    store_timeout_s: float = 3.0,
    settle_s: float = 0.1,
    cancelled: Callable[[], bool] = lambda: False,
    on_error: Callable[[str], None] = lambda _: None,
    sealed: list[Entry] | None = None,
) -> Procedure:
    """Recover every unclean epoch below ``epoch``; retries until done.

    Questions to the nodeset resume ``settle_s`` after an f-majority answered
    (or when all did): one lost or slow node does not cost a whole timeout in
    every step of every epoch.

    A failed attempt (too few nodes answered, or took the decisions) is
    reported to ``on_error`` and tried again after a short, growing pause
    (``RETRY_FIRST_S`` doubling up to ``RETRY_MAX_S``); every attempt asks
    ``alive()`` afresh which nodes to use.  ``stamp_cap_ms``: the new
    sequencer's start; what it writes for an epoch is stamped no later than
    that nor than the start of any later epoch (``recovery_stamps``).

    ``sealed``: the producer entries of the nodes the activation sealed.

    Returns the producers of idempotent appends in the earlier epochs once
    every one is clean, None if the recovery was overtaken (a newer
    sequencer sealed the log) or ``cancelled()``.
    """
    state = LogEpochs(epoch + 1, tuple(history))
    timeouts = _Timeouts(ask_timeout_s, digest_timeout_s, store_timeout_s, settle_s)
    backoff = RETRY_FIRST_S
    while not cancelled():
        try:
            return (
                yield from _recover_once(
                    log_id, epoch, state, make_selector, alive, stamp_cap_ms, timeouts, sealed
                )
            )
        except PreemptedError as exc:
            _log.info("log %d: recovery in epoch %d overtaken: %s", log_id, epoch, exc)
            return None
        except LogstrandError as exc:
            _log.warning(
                "log %d: recovery in epoch %d: %s (again in %.2f s)", log_id, epoch, exc, backoff
            )
            on_error(str(exc))
            yield Sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_S)
    _log.info("log %d: recovery in epoch %d stops: the sequencer was replaced", log_id, epoch)
    return None


def _recover_once(
    log_id: int,
    epoch: int,
    state: LogEpochs,
    make_selector: Callable[[EpochMetadata], CopysetSelector],
    alive: Callable[[], Container[int]],
    stamp_cap_ms: int,
    timeouts: _Timeouts,
    sealed: list[Entry] | None,
) -> Procedure:
    """One attempt of ``recover``: every unclean epoch in turn, each marked
    clean as it is done.  Raises what made it fail."""
    # The snapshot is read after the LCE, so it covers at least that.
    lce, (_, producers) = yield EpochStoreCall(
        lambda s: (s.last_clean_epoch(log_id), s.producer_snapshot(log_id))
    )
    starts, standing = yield EpochStoreCall(lambda s: (s.epoch_starts(log_id), _standing(s)))
    for e in range(lce + 1, epoch):
        meta = state.metadata_for(e)
        if meta is None:
            continue  # no sequencer ever had this epoch
        decided = yield from _recover_epoch(
            log_id,
            e,
            meta,
            epoch,
            make_selector(meta),
            alive,
            # No later epoch starts below what this one ends with.
            min([stamp_cap_ms] + [t for x, t in starts.items() if e < x < epoch]),
            timeouts,
            standing,
            in_epoch(sealed or (), e),
        )
        producers.update(decided)
        producers.expire(stamp_cap_ms)
        with contextlib.suppress(StaleError):  # a later sequencer got further
            yield EpochStoreCall(partial(set_clean, log_id, e, producers))
    return producers


@attrs.frozen
class _Timeouts:
    ask_s: float
    digest_s: float
    store_s: float
    settle_s: float


def _released(
    log_id: int, e: int, meta: EpochMetadata, t: _Timeouts, standing: Standing
) -> Procedure:
    """The highest release pointer a quorum of the epoch's nodeset reports."""
    asked = tuple((n, LogInfo(0, log_id)) for n in meta.nodeset)
    replies = yield Ask(asked, t.ask_s, _answered(meta, standing), t.settle_s)
    oks = {
        n: r for n, r in replies.items() if isinstance(r, LogInfoReply) and r.status == Status.OK
    }
    if not quorum(meta.nodeset, meta.replication_factor, oks, standing):
        raise LogstrandError(
            f"epoch {e}: release pointers from {sorted(oks)} only, of {list(meta.nodeset)}",
            Status.NOSEQUENCER,
        )
    return max(i.release_lsn for i in oks.values())


def _digests(
    log_id: int,
    e: int,
    meta: EpochMetadata,
    seal: int,
    rec: EpochRecovery,
    t: _Timeouts,
    standing: Standing,
) -> Procedure:
    """Digests of epoch ``e`` above the LNG, page by page, from every node of
    the nodeset at once, into ``rec``, until a quorum has sent complete ones.
    Returns the producer entries the digests carried."""
    entries: list[Entry] = []
    start = dict.fromkeys(meta.nodeset, rec.lng_esn + 1)
    for _ in range(DIGEST_ROUNDS_MAX):
        pending = [n for n in meta.nodeset if n not in rec.complete and n in start]
        if rec.ready or not pending:
            break
        # Enough once a quorum has complete digests, with these pages.
        replies = yield Ask(
            tuple((n, GetDigest(0, log_id, e, start[n], seal - 1)) for n in pending),
            t.digest_s,
            _answered(meta, standing, rec.complete),
            t.settle_s,
        )
        for n in pending:
            reply = replies.get(n)
            if not isinstance(reply, Digest) or reply.status != Status.OK:
                del start[n]  # this node is out of this round of recovery
                continue
            entries += digest_entries(reply)
            records = _digest_records(reply)
            rec.on_digest(n, records, complete=reply.complete or not records)
            if records:
                start[n] = records[-1].esn + 1
    if not rec.ready:
        raise LogstrandError(
            f"epoch {e}: complete digests from {sorted(rec.complete)} only, of "
            f"{list(meta.nodeset)}",
            Status.NOSEQUENCER,
        )
    return entries


def _digest_records(reply: Digest) -> list[DigestRecord]:
    if reply.batch is None:
        return []
    b = reply.batch.columns()
    extras = b.extras or [None] * len(b.lsns)
    return [
        DigestRecord(lsn_esn(lsn), fl, wave, ts, key, payload, extra)
        for lsn, fl, wave, ts, key, payload, extra in zip(
            b.lsns, b.flags, reply.waves, b.timestamps_ms, b.keys, b.payloads, extras, strict=True
        )
    ]


def _answered(
    meta: EpochMetadata, standing: Standing, also: Collection[int] = ()
) -> Callable[[Mapping[int, Any]], bool]:
    """``Ask.enough``: the nodes that answered OK (and ``also``) are a ``quorum``."""

    def enough(replies: Mapping[int, Any]) -> bool:
        answered = _oks(replies) | set(also)
        return quorum(meta.nodeset, meta.replication_factor, answered, standing)

    return enough


def _recover_epoch(
    log_id: int,
    e: int,
    meta: EpochMetadata,
    seal: int,
    selector: CopysetSelector,
    alive: Callable[[], Container[int]],
    stamp_cap_ms: int,
    t: _Timeouts,
    standing: Standing = NO_STANDING,
    entries: list[Entry] | None = None,
) -> Procedure:
    """Decide and write how epoch ``e`` ends.  Returns the producer entries
    of the epoch whose batches are in the log (of ``entries``, the sealed
    nodes' tables, and of the digests' tables)."""
    entries = list(entries or ())
    released = yield from _released(log_id, e, meta, t, standing)
    if lsn_epoch(released) > e:
        # Released past its end already: an earlier recovery decided it.
        # Its producer entries above that recovery's LNG may name batches it
        # plugged with holes: only then is it decided again (the same way).
        if not entries:
            return []
        end = yield EpochStoreCall(lambda s: s.epoch_end(log_id, e))
        lng = end.lng_esn if end is not None else 0
        if all(lsn_esn(s.lsn) + s.count - 1 <= lng for _, s in entries):
            return entries
    else:
        lng = lsn_esn(released) if lsn_epoch(released) == e else 0
    rec = EpochRecovery(
        log_id,
        e,
        meta.nodeset,
        meta.replication_factor,
        seal_epoch=seal,
        lng_esn=lng,
        standing=standing,
    )
    entries += yield from _digests(log_id, e, meta, seal, rec, t, standing)
    plan = rec.decide()
    records = frozenset(m.esn for m in plan if m.decision is Decision.RECORD)
    keep = list(kept(entries, lng, records))
    yield from write_decisions(
        log_id, e, seal, plan, selector, alive, stamp_cap_ms, t.store_s, keep, owners=entries
    )
    # Tell the nodes (through the epoch store) which copies of the epoch are
    # good, before any of them may hand the epoch's end to readers.
    end = EpochEnd(lng, plan[-1].esn, seal)
    yield EpochStoreCall(lambda s: s.record_epoch_end(log_id, e, end))
    # Let readers past the bridge at once, on every node that held the epoch:
    # released up to ESN 0 of the next epoch, i.e. past this one's end, so a
    # later recovery knows there is nothing left to decide in it (ESN 0 is
    # never used, so nothing of the next epoch is released by this).
    for n in meta.nodeset:
        yield Tell(n, Release(log_id, compose_lsn(e + 1, 0)))
    _log.info(
        "log %d epoch %d recovered: %d decisions up to ESN %d", log_id, e, len(plan), plan[-1].esn
    )
    return keep

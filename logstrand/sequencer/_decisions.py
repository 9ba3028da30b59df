"""How recovery's decisions reach R nodes: a chunk at a time, each chunk one
recovery STORE (carrying the recovery's seal, and the producer entries of
the batches that end in it) on a copyset of nodes believed alive, a node
that fails ruled out for the chunk.  A procedure, as ``_procedures``'s are:
it yields commands and never does I/O."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from ..batch import make_batch
from ..errors import LogstrandError, PreemptedError, Status
from ..idempotence._recovery import Entry, chunk_entries
from ..types import compose_lsn, lsn_epoch, lsn_esn
from ..wire import Store
from ._commands import Procedure, StoreCopies

if TYPE_CHECKING:
    from collections.abc import Callable, Container, Iterator, Sequence

    from ..batch import PackedBatch
    from ..placement import CopysetSelector
    from ._recovery import Mutation

#: The store id of a recovery STORE has this bit (the driver adds its own id).
RECOVERY_STORE_BIT = 1 << 63
#: Decisions written in one STORE at most.
CHUNK_RECORDS = 10_000


def write_decisions(
    log_id: int,
    e: int,
    seal: int,
    plan: list[Mutation],
    selector: CopysetSelector,
    alive: Callable[[], Container[int]],
    stamp_cap_ms: int,
    timeout_s: float,
    entries: list[Entry] | None = None,
    owners: Sequence[Entry] = (),
) -> Procedure:
    """Store the decisions, a chunk at a time.  Each chunk carries the kept
    producer entries whose batches end in it: a node that holds only these
    copies (the batch's own nodes may be gone) then knows the batch too, and
    a later recovery, should this one be cut short, keeps it.

    A chunk is cut where a transaction's records or markers begin or end
    (``runs``): readers learn from a stored batch's first record whether
    its records are a transaction's, and from its producer whose (the
    producers of ``owners``, every entry recovery saw of the epoch)."""
    stamps = recovery_stamps([m.timestamp_ms for m in plan], stamp_cap_ms)
    owner = _owners(e, owners)
    for i in range(0, len(plan), CHUNK_RECORDS):
        chunk = plan[i : i + CHUNK_RECORDS]
        at = i
        for run, producer in runs(chunk, owner):
            batch = make_batch(
                [compose_lsn(e, m.esn) for m in run],
                [m.payload for m in run],
                timestamps_ms=stamps[at : at + len(run)],
                keys=[m.key for m in run],
                flags=[m.flags for m in run],
                extras=[m.extra for m in run],
                producer=producer,
            )
            at += len(run)
            ends_here = chunk_entries(entries or (), run[0].esn, run[-1].esn)
            yield from _store_chunk(log_id, seal, selector, batch, alive, timeout_s, ends_here)


def _owners(epoch: int, entries: Sequence[Entry]) -> Callable[[int], tuple[int, int] | None]:
    """ESN -> (producer key, sequence number) of the batch that wrote it,
    from the producer entries of ``epoch`` (None: no producer known)."""
    spans = sorted(
        (lsn_esn(s.lsn), lsn_esn(s.lsn) + s.count - 1, key, s.seq)
        for key, s in entries
        if lsn_epoch(s.lsn) == epoch
    )
    firsts = [x[0] for x in spans]

    def owner(esn: int) -> tuple[int, int] | None:
        at = bisect.bisect_right(firsts, esn) - 1
        if at < 0 or spans[at][1] < esn:
            return None
        first, _, key, seq = spans[at]
        return key, seq + esn - first

    return owner


def runs(
    chunk: list[Mutation], owner: Callable[[int], tuple[int, int] | None]
) -> Iterator[tuple[list[Mutation], tuple[int, int] | None]]:
    """``chunk`` in runs a stored batch each: plain records, holes and
    bridges together; a transaction's records (or markers) by themselves,
    one producer each, under the producer's (key, first number)."""
    start = 0
    while start < len(chunk):
        head = chunk[start]
        producer = owner(head.esn) if head.appended else None
        end = start + 1
        while end < len(chunk):
            m = chunk[end]
            if m.appended != head.appended:
                break
            if head.appended:
                nxt = owner(m.esn)
                want = None if producer is None else (producer[0], producer[1] + end - start)
                if nxt != want:
                    break
            end += 1
        yield chunk[start:end], producer
        start = end


def recovery_stamps(stamps: list[int], cap_ms: int) -> list[int]:
    """Timestamps for what recovery writes (0: a hole or bridge), so that the
    log's timestamps never go back: none above ``cap_ms`` (the new sequencer
    stamps at or above it; a copy newer than it was never acknowledged, or a
    sealed node would hold it), a plug takes the stamp of the record after it
    (``cap_ms`` at the end), and they never decrease in ESN order."""
    out = [0] * len(stamps)
    after = cap_ms
    for i in range(len(stamps) - 1, -1, -1):
        after = min(stamps[i] or after, after)
        out[i] = after
    return out


def _store_chunk(
    log_id: int,
    seal: int,
    selector: CopysetSelector,
    batch: PackedBatch,
    alive: Callable[[], Container[int]],
    timeout_s: float,
    producers: bytes = b"",
) -> Procedure:
    """Store one chunk of decisions on R nodes (``producers``: the entries
    the chunk carries).

    A node that fails is not picked again for this chunk; when no copyset is
    left among the nodes believed alive, this attempt fails at once, and the
    caller tries again after a pause, with a fresh view of who is alive.
    """
    live = alive()
    failed: set[int] = {n for n in selector.nodeset if n not in live}
    for _ in range(len(selector.nodeset)):  # each round rules out one node more
        copyset = selector.select(failed)
        if copyset is None:
            break
        # The driver gives the STORE a store id of its own (RECOVERY_STORE_BIT set).
        msg = Store.of(RECOVERY_STORE_BIT, log_id, seal, copyset, 0, True, batch, seal, producers)
        statuses = yield StoreCopies(msg, timeout_s)
        if any(statuses.get(n) == Status.PREEMPTED for n in copyset):
            raise PreemptedError(f"log {log_id}: a newer sequencer sealed it")
        bad = {n for n in copyset if statuses.get(n) != Status.OK}
        if not bad:
            return
        failed |= bad
    raise LogstrandError(
        f"recovery could not store its decisions on {selector.replication} nodes "
        f"(down or failing: {sorted(failed)})",
        Status.NOSEQUENCER,
    )

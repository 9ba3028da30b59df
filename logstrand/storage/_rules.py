"""The storage node's request rules: what a node decides about STOREs, seals,
digests, and which copies it may serve.  Pure, no trio.

The node's trio shell (``_node.py``) and the seeded simulation (``tests/sim``)
both call these, so the rules the simulation checks are the rules the real
node runs:

* ``admit_store``: a STORE for an epoch at or below the log's seal is refused
  (PREEMPTED), unless it is a recovery's STORE whose seal is newer than the
  node's, or rebuilding's (released records, at their LSNs).  A recovery
  STORE also raises the seal to just below its own epoch: a node it writes
  to then refuses every older sequencer *and every older recovery*, so a late
  write of an interrupted recovery can never land on top
  of a newer recovery's decision.
* ``digest``: this node's copies of one epoch from an ESN on, released or not,
  with the wave (precedence) of each copy.
* ``log_info``: the node's release pointer, trim point, tail and sizes.
* ``servable``: which copies a node may hand readers.  Up to its release
  pointer, the copies of the epoch being released are all good.  An epoch
  that ended before was ended by a recovery, whose ``EpochEnd`` says which
  copies are good: any copy up to its LNG; above, only the copies that
  recovery (or a later one) wrote; nothing past the bridge.  Anything else is a
  leftover of a sequencer or recovery that died, on a node the final recovery
  did not reach, and is withheld (as if absent).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Protocol

from ..errors import Status
from ..records import PRODUCER_ENTRY_BYTES as ENTRY_BYTES
from ..records import WRITTEN_BY_REBUILDING, WRITTEN_BY_RECOVERY
from ..types import compose_lsn, lsn_epoch
from ..wire import (
    Digest,
    GetDigest,
    GetLogDirectory,
    LogDirectory,
    LogInfo,
    LogInfoReply,
    Seal,
    SealReply,
    Store,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..batch import PackedBatch
    from ..epochstore._model import EpochEnd
    from ..logsdb._format import DirEntry, StoredBatch


class LogStore(Protocol):
    """What these rules read and write of a node's LogsDB."""

    def seal_epoch(self, log_id: int) -> int: ...
    def seal(self, log_id: int, epoch: int, *, sync: bool = True) -> int: ...
    def trim_point(self, log_id: int) -> int: ...
    def local_floor(self, log_id: int) -> int: ...
    def last_lsn(self, log_id: int) -> int: ...
    def directory(self, log_id: int) -> list[tuple[int, DirEntry]]: ...
    def producers(self, log_id: int) -> bytes: ...
    def read_batch(
        self,
        log_id: int,
        start: int = ...,
        until: int = ...,
        *,
        max_records: int = ...,
        max_bytes: int = ...,
    ) -> StoredBatch: ...


DIGEST_RECORDS_MAX = 20_000
DIGEST_BYTES_MAX = 16 * 1024 * 1024


def admit_store(db: LogStore, msg: Store) -> bool:
    """True if the STORE may be written; raises the seal for recovery STOREs.

    The seal is persisted (synced) before this returns when it moves.
    """
    if msg.rebuilding:
        return True  # released records, re-created: no sequencer writes them again
    first = msg.batch.first_lsn
    seal = db.seal_epoch(msg.log_id)
    if msg.recovery_seal:
        # Written by the recovery of a sequencer in epoch ``recovery_seal``.
        if msg.recovery_seal <= seal:
            return False  # a newer sequencer sealed the log since
        if msg.recovery_seal - 1 > seal:
            db.seal(msg.log_id, msg.recovery_seal - 1)
        return True
    return lsn_epoch(first) > seal


def digest(db: LogStore, node_id: int, msg: GetDigest) -> Digest:
    """This node's copies of one epoch from ``msg.start_esn`` on, released or not.

    Seals the log up to ``msg.seal_epoch`` first (persisted): a digest only
    counts if no older sequencer or recovery can write here after it.
    """
    if msg.seal_epoch > db.seal_epoch(msg.log_id):
        db.seal(msg.log_id, msg.seal_epoch)
    base = compose_lsn(msg.epoch, 0)
    batch = db.read_batch(
        msg.log_id,
        base | max(msg.start_esn, 1),
        base | 0xFFFFFFFF,
        max_records=DIGEST_RECORDS_MAX,
        max_bytes=DIGEST_BYTES_MAX,
    )
    complete = len(batch) < DIGEST_RECORDS_MAX and batch.payload_bytes < DIGEST_BYTES_MAX
    return Digest(
        msg.request_id,
        int(Status.OK),
        node_id,
        complete,
        tuple(batch.waves),
        batch.to_packed() if len(batch) else None,
        _entries_among(db.producers(msg.log_id), batch.lsns),
    )


def _entries_among(table: bytes, lsns: Sequence[int]) -> bytes:
    """The producer entries of ``table`` whose batches start among ``lsns``."""
    if not table or not lsns:
        return b""
    have = set(lsns)
    at = ENTRY_BYTES
    return b"".join(
        table[i : i + at]
        for i in range(0, len(table), at)
        if int.from_bytes(table[i + 20 : i + 28], "little") in have
    )


def log_info(db: LogStore, release_lsn: int, msg: LogInfo) -> LogInfoReply:
    """What this node knows of one log."""
    log = msg.log_id
    entries = [e for _, e in db.directory(log)]
    trim = db.trim_point(log)
    live = [e for e in entries if e.last_lsn > trim]
    # Every LSN at or below the local floor was released (the offload reads
    # released records only, and the floor never passes the tiered point),
    # and this node no longer holds its copies of them: it says so as its
    # release pointer.  A recovery takes the highest pointer of a quorum as
    # its LNG and digests only above it, so it never asks for the copies
    # dropped here; digested without them, it would find too few copies of
    # acknowledged records and plug holes over them (the simulation's tier
    # seed 140 did).
    release_lsn = max(release_lsn, db.local_floor(log))
    return LogInfoReply(
        msg.request_id,
        int(Status.OK),
        release_lsn,
        trim,
        db.last_lsn(log),
        sum(e.bytes for e in live),
        sum(e.records for e in live),
        min((e.min_ts_ms for e in live), default=0),
        max((e.max_ts_ms for e in live), default=0),
    )


def log_directory(db: LogStore, msg: GetLogDirectory) -> LogDirectory:
    """This node's partition directory entries of one log above its trim point
    (what a planner uses to cut a log into ranges of similar size)."""
    trim = db.trim_point(msg.log_id)
    flat: list[int] = []
    for _, e in db.directory(msg.log_id)[-65536:]:
        if e.last_lsn > trim:
            first = max(e.first_lsn, trim + 1)
            flat += (first, e.last_lsn, e.min_ts_ms, e.max_ts_ms, e.bytes, e.records)
    return LogDirectory(msg.request_id, int(Status.OK), tuple(flat))


def servable(
    lsns: Sequence[int],
    flags: Sequence[int],
    waves: Sequence[int],
    release_lsn: int,
    end_of: Callable[[int], EpochEnd | None],
) -> list[int] | None:
    """Indices of the copies (all at or below the release pointer, in LSN
    order) that may go to readers; None when all of them may.

    ``end_of(epoch)`` is the recorded end of an epoch before the release
    pointer's (None: nothing was recovered in it, every copy is good).
    """
    current = lsn_epoch(release_lsn)
    n = len(lsns)
    if not n or lsn_epoch(lsns[0]) >= current:
        return None  # the epoch being released: every copy is good
    keep: list[int] = []
    dropped = False
    i = 0
    while i < n:
        e = lsn_epoch(lsns[i])
        if e >= current:
            keep.extend(range(i, n))
            break
        j = bisect.bisect_left(lsns, compose_lsn(e + 1, 0), i)
        end = end_of(e)
        if end is None:
            keep.extend(range(i, j))
        else:
            good = bisect.bisect_right(lsns, compose_lsn(e, end.lng_esn), i, j)
            keep.extend(range(i, good))
            bridge = compose_lsn(e, end.bridge_esn)
            for k in range(good, j):
                # A later recovery that got this far saw this one's copies and
                # decided the same (see EpochEnd): its copies are good too.
                by_recovery = flags[k] & WRITTEN_BY_RECOVERY and waves[k] >= end.seal
                if by_recovery and lsns[k] <= bridge:
                    keep.append(k)
                else:
                    dropped = True
        i = j
    return keep if dropped else None


def donation_windows(
    batches: Sequence[PackedBatch], pos: int, until: int
) -> list[tuple[PackedBatch, int, int]]:
    """What a rebuilding donor walks of the batches it read from ``pos``: each
    batch's copies within ``pos..until``.  A batch may begin below ``pos``
    (a donor that resumed where an earlier pass stopped, at a release
    pointer inside the batch): its copies from ``pos`` on are still to do."""
    return [
        (b, max(b.first_lsn, pos), min(b.last_lsn, until))
        for b in batches
        if b.last_lsn >= pos and b.first_lsn <= until
    ]


#: Rebuilding's STOREs carry this bit in their id (recovery's carry
#: ``RECOVERY_STORE_BIT``): their replies go to the rebuilder.
REBUILDING_STORE_BIT = 1 << 62


def rebuilt_copies(
    store_id: int, log_id: int, pb: PackedBatch, copyset: tuple[int, ...], release: int
) -> Store:
    """Rebuilding's STORE of the new copies of one stored batch: the same
    records, LSNs and wave under the new ``copyset``, flagged as written by
    rebuilding, carrying the release pointer the donor walked to (they are
    released records); unsynced (the donor's progress is saved after)."""
    batch = pb.reheader(copyset=copyset, add_flags=WRITTEN_BY_REBUILDING)
    return Store(
        REBUILDING_STORE_BIT | store_id, log_id, pb.wave, copyset, release, False, batch, 0, True
    )


def cut_to_windows(windows: Sequence[tuple[PackedBatch, int, int]]) -> list[PackedBatch]:
    """Each (batch, first, last) of ``servable_windows`` as a batch of its own:
    what rebuilding may re-create.  A copy readers are never served (left by
    a sequencer that died, above its recovery's LNG) is no record of the log;
    re-created, it would also replace the recovery's copy on the recipient
    and hide the record there (the rolling rebuilding test lost a batch so).
    """
    out: list[PackedBatch] = []
    for b, lo, hi in windows:
        if lo == b.first_lsn and hi == b.last_lsn:
            out.append(b)
        else:
            lsns = b.lsns()
            out.append(b.select([i for i, x in enumerate(lsns) if lo <= x <= hi]))
    return out


def servable_windows(
    items: Sequence[tuple[PackedBatch, int, int]],
    release_lsn: int,
    end_of: Callable[[int], EpochEnd | None],
) -> list[tuple[PackedBatch, int, int]]:
    """``servable`` per stored batch: each (batch, first, last) window cut to
    the copies that may go to readers, batches with none left out.

    A batch holds one wave and one kind of copy, so what a recovery allows of
    it is a run of LSNs: its window shrinks.  Should that ever not be one
    run, the batch is rewritten with only the copies allowed (decoded: rare).
    """
    current = lsn_epoch(release_lsn)
    out: list[tuple[PackedBatch, int, int]] = []
    for b, lo, hi in items:
        if lsn_epoch(b.first_lsn) >= current:
            out.append((b, lo, hi))
            continue
        all_lsns = b.lsns()
        a = bisect.bisect_left(all_lsns, lo)
        z = bisect.bisect_right(all_lsns, hi)
        lsns = all_lsns[a:z]
        if not lsns:
            continue
        keep = servable(lsns, b.flags()[a:z], [b.wave] * len(lsns), release_lsn, end_of)
        if keep is None:
            out.append((b, lo, hi))
        elif not keep:
            continue
        elif keep[-1] - keep[0] == len(keep) - 1:
            out.append((b, lsns[keep[0]], lsns[keep[-1]]))
        else:
            sub = b.select([a + i for i in keep])
            out.append((sub, sub.first_lsn, sub.last_lsn))
    return out


def answer(
    db: LogStore, node_id: int, release_lsn: int, msg: LogInfo | Seal | GetDigest
) -> LogInfoReply | SealReply | Digest:
    """A node's answer to a sequencer's or a recovery's question.

    ``release_lsn``: the node's release pointer for ``msg.log_id``.
    """
    if isinstance(msg, LogInfo):
        return log_info(db, release_lsn, msg)
    if isinstance(msg, Seal):
        # Persisted (synced) before the reply: the seal must survive a crash.
        sealed = db.seal(msg.log_id, msg.seal_epoch)
        newest = max((e.max_ts_ms for _, e in db.directory(msg.log_id)), default=0)
        return SealReply(
            msg.request_id, int(Status.OK), node_id, sealed, newest, db.producers(msg.log_id)
        )
    return digest(db, node_id, msg)

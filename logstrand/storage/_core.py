"""What a storage node decides about the recovery-related messages: pure, no trio.

The node's trio shell (``_node.py``) and the seeded simulation (``tests/sim``)
both call these, so the rules the simulation checks are the rules the real
node runs:

* ``admit_store``: a STORE for an epoch at or below the log's seal is refused
  (PREEMPTED), unless it is a recovery's STORE whose seal is newer than the
  node's.  A recovery STORE also raises the seal to just below its own epoch:
  a node it writes to then refuses every older sequencer *and every older
  recovery*, so a late write of an interrupted recovery can never land on top
  of a newer recovery's decision.
* ``digest``: this node's copies of one epoch from an ESN on, released or not,
  with the wave (precedence) of each copy.
* ``log_info``: the node's release pointer, trim point, tail and sizes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Status
from ..wire import Digest, LogInfoReply

if TYPE_CHECKING:
    from ..logsdb import LogsDB
    from ..wire import GetDigest, LogInfo, Store

DIGEST_RECORDS_MAX = 20_000
DIGEST_BYTES_MAX = 16 * 1024 * 1024


def admit_store(db: LogsDB, msg: Store) -> bool:
    """True if the STORE may be written; raises the seal for recovery STOREs.

    The seal is persisted (synced) before this returns when it moves.
    """
    lsns = msg.batch.lsns
    if not lsns:
        return True
    seal = db.seal_epoch(msg.log_id)
    if msg.recovery_seal:
        # Written by the recovery of a sequencer in epoch ``recovery_seal``.
        if msg.recovery_seal <= seal:
            return False  # a newer sequencer sealed the log since
        if msg.recovery_seal - 1 > seal:
            db.seal(msg.log_id, msg.recovery_seal - 1)
        return True
    return lsns[0] >> 32 > seal


def digest(db: LogsDB, node_id: int, msg: GetDigest) -> Digest:
    """This node's copies of one epoch from ``msg.start_esn`` on, released or not."""
    base = msg.epoch << 32
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
        batch.to_record_batch(),
    )


def log_info(db: LogsDB, release_lsn: int, msg: LogInfo) -> LogInfoReply:
    """What this node knows of one log."""
    log = msg.log_id
    entries = [e for _, e in db.directory(log)]
    trim = db.trim_point(log)
    live = [e for e in entries if e.last_lsn > trim]
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

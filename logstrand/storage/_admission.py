"""Does a message make sense?  Checked at the node's dispatch before any
handler sees it.  Pure: no trio; the node's ``Guard`` supplies the facts.

A message can be well formed (the wire checked every field's type and range)
and still make no sense to the cluster.  Each rule below stops one way such a
message could crash a node, erase or forge data, or block a log for good:

* a log id the configuration does not have (NOTFOUND): a node keeps no state
  for such a log, not even a release pointer;
* a STORE, RELEASE, SEAL or digest request in an epoch the epoch store has
  not handed out (INVALID_PARAM): no sequencer can exist for it, so such a
  message could only seal a log for ever or make records readable that
  nobody appended (a RELEASE up to ESN 0 of an epoch releases only the
  epoch before it);
* a recovery STORE whose seal epoch was not handed out, whose recovery has
  finished (the last clean epoch reached it), or that writes into its own
  or a later epoch: recovery only rewrites epochs before its own, once.  The
  one STORE with the seal of its own epoch is the single bridge a stopping
  sequencer ends its epoch with (``sequencer._handoff``), refused once that
  epoch is clean;
* an ESN of 0, or a copyset naming a node the cluster does not have;
* a TRIM to one node above the trim point the epoch store records: a client
  records a trim there first, so a node need never take more on one
  connection's word (and readers, who take the highest trim point any node
  reports, cannot be made to skip records that are still there);
* CLEAN_POINT and DROP_COPIES for a log that is not compacted: a clean point
  turns missing copies into COMPACTED gaps, which would hide lost data.

A refusal may rest on a cached fact that is out of date (a log created a
moment ago, an epoch just taken): ``recheck`` names the fact to read again
before the refusal stands.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from ..errors import Status
from ..records import BRIDGE, INTERNAL_LOGS, LOG_ID_MAX
from ..types import lsn_epoch, lsn_esn
from ..wire import (
    Amend,
    CleanPoint,
    DropCopies,
    GetDigest,
    Release,
    Seal,
    Store,
    Trim,
    TrimLog,
)


class Facts(Protocol):
    """What the node knows, from its cache of the epoch store."""

    def log_known(self, log_id: int) -> bool: ...
    def compacted(self, log_id: int) -> bool: ...
    def node_known(self, node_id: int) -> bool: ...
    #: The log's next epoch (every epoch below it was handed out); 0 if unknown.
    def next_epoch(self, log_id: int) -> int: ...
    def trim_point(self, log_id: int) -> int: ...
    #: The log's last clean epoch as last read (it only grows).
    def last_clean_epoch(self, log_id: int) -> int: ...


@attrs.frozen
class Refusal:
    status: Status
    reason: str
    #: "config", "epochs" or "trim": the fact to refresh before refusing.
    recheck: str | None = None


def _epoch_refusal(facts: Facts, log_id: int, epoch: int, what: str) -> Refusal | None:
    if epoch >= facts.next_epoch(log_id):
        return Refusal(
            Status.INVALID_PARAM,
            f"log {log_id}: {what} names epoch {epoch}, which was never handed out",
            "epochs",
        )
    return None


def check(msg: Any, facts: Facts) -> Refusal | None:
    """Why ``msg`` must be refused, or None."""
    log_id = getattr(msg, "log_id", None)
    if log_id is None:
        return None
    if not 1 <= log_id <= LOG_ID_MAX and log_id not in INTERNAL_LOGS:
        return Refusal(Status.INVALID_PARAM, f"{log_id} is not a log id")
    if not facts.log_known(log_id):
        return Refusal(Status.NOTFOUND, f"log {log_id} is not in the configuration", "config")
    kind = type(msg)
    if kind is Store:
        return _store(msg, facts)
    if kind is Release:
        # ESN 0 of an epoch is never a record: releasing up to it releases
        # only the epoch before, which a stopping sequencer ended itself.
        past = 1 if lsn_esn(msg.lsn) == 0 else 0
        return _epoch_refusal(facts, log_id, lsn_epoch(msg.lsn) - past, "RELEASE")
    if kind is Seal:
        return _epoch_refusal(facts, log_id, msg.seal_epoch, "SEAL")
    if kind is GetDigest:
        return _epoch_refusal(facts, log_id, max(msg.epoch, msg.seal_epoch), "a digest request")
    if kind is TrimLog:
        return _epoch_refusal(facts, log_id, lsn_epoch(msg.lsn), "TRIM")
    if kind is Trim:
        recorded = facts.trim_point(log_id)
        if msg.lsn > recorded:
            return Refusal(
                Status.INVALID_PARAM,
                f"log {log_id}: TRIM to {msg.lsn:#x} is above the trim point the epoch "
                f"store records ({recorded:#x}); trim through the client, which records it first",
                "trim",
            )
        return None
    if kind is Amend:
        for node in msg.copyset:
            if not facts.node_known(node):
                return Refusal(
                    Status.INVALID_PARAM,
                    f"AMEND's copyset names node {node}, not a member",
                    "config",
                )
        return None
    if kind in (CleanPoint, DropCopies) and not facts.compacted(log_id):
        return Refusal(
            Status.INVALID_PARAM,
            f"log {log_id} is not compacted: {kind.__name__} is only for compacted logs",
            "config",
        )
    return None


def _store(msg: Store, facts: Facts) -> Refusal | None:
    log_id = msg.log_id
    for node in msg.copyset:
        if not facts.node_known(node):
            return Refusal(
                Status.INVALID_PARAM, f"STORE's copyset names node {node}, not a member", "config"
            )
    first = msg.batch.first_lsn
    if lsn_esn(first) == 0:
        return Refusal(Status.INVALID_PARAM, f"log {log_id}: ESN 0 is never a record")
    epoch = lsn_epoch(first)
    refused = _epoch_refusal(facts, log_id, epoch, "STORE")
    if refused is not None or not msg.recovery_seal:
        return refused
    refused = _epoch_refusal(facts, log_id, msg.recovery_seal, "a recovery STORE's seal")
    if refused is not None:
        return refused
    own_end = epoch == msg.recovery_seal and msg.batch.count == 1 and msg.batch.flag_bits & BRIDGE
    if msg.recovery_seal - (0 if own_end else 1) <= facts.last_clean_epoch(log_id):
        return Refusal(
            Status.PREEMPTED,
            f"log {log_id}: the recovery sealed at epoch {msg.recovery_seal} has finished; "
            "it writes nothing more",
        )
    if epoch >= msg.recovery_seal and not own_end:
        return Refusal(
            Status.INVALID_PARAM,
            f"log {log_id}: a recovery sealed at epoch {msg.recovery_seal} only rewrites "
            f"earlier epochs, not epoch {epoch}",
        )
    return None

"""Recovery decisions for one unclean epoch: a pure core (no trio, no I/O).

Theory of operation
-------------------
A new sequencer has sealed the epoch on an f-majority of its nodeset
(``|nodeset| - R + 1`` nodes).  Each sealed node sends a *digest*: its copies
of the epoch's records above the last known good ESN (LNG; everything up to
it is known fully stored).  Once an f-majority of complete digests is in:

* an ESN with a copy somewhere in the digests may have been acknowledged: it
  becomes a RECORD, with the content of its highest-precedence copy;
* an ESN with no copy on an f-majority was never acknowledged (an
  acknowledged record has R copies, and every f-majority meets every R-set):
  it becomes a HOLE plug;
* one past the highest ESN seen, a BRIDGE ends the epoch (also for an empty
  epoch, at LNG + 1).

Precedence: a copy written by a recovery carries that recovery's seal epoch,
and beats every copy written by the epoch's own sequencer (whose precedence is
its store wave); between two recoveries the later (higher seal) wins.  So a
recovery that was interrupted and is redone by a later sequencer can only
confirm or override what the earlier one wrote, never be overridden by it.

The shell writes every decision to R nodes (records and plugs flagged
WRITTEN_BY_RECOVERY, with this recovery's seal epoch as the wave), then marks
the epoch clean.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from ..records import (
    BRIDGE,
    ESN_MAX,
    FLAGS_APPENDED,
    HOLE,
    TOMBSTONE,
    WRITTEN_BY_RECOVERY,
    precedence,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable


class Decision(enum.Enum):
    RECORD = "record"
    HOLE = "hole"
    BRIDGE = "bridge"


@attrs.frozen
class DigestRecord:
    """One node's copy of one ESN, as the digest reports it."""

    esn: int
    flags: int
    wave: int  # the store wave, or the seal epoch of the recovery that wrote it
    timestamp_ms: int
    key: bytes | None
    payload: bytes | None
    extra: bytes | None = None  # headers and a create time (``batch.pack_extra``)

    @property
    def precedence(self) -> tuple[int, int]:
        return precedence(self.flags, self.wave)


@attrs.frozen
class Mutation:
    """What recovery writes at one ESN (to R nodes)."""

    esn: int
    decision: Decision
    timestamp_ms: int = 0
    key: bytes | None = None
    payload: bytes | None = None
    extra: bytes | None = None
    #: The copy's appender flags (``FLAGS_APPENDED``: a transaction's record
    #: or marker), which the record keeps: without them an aborted
    #: transaction's record would pass for a plain one, and a marker for a
    #: record, once recovery wrote them again.
    appended: int = 0

    @property
    def flags(self) -> int:
        if self.decision is Decision.BRIDGE:
            return BRIDGE | HOLE | WRITTEN_BY_RECOVERY
        if self.decision is Decision.HOLE:
            return HOLE | WRITTEN_BY_RECOVERY
        tomb = TOMBSTONE if self.payload is None else 0
        return tomb | WRITTEN_BY_RECOVERY | self.appended


@attrs.frozen
class Standing:
    """Rebuilding's authoritative status of nodes, as recovery counts answers
    (``rebuilding.Authority``): ``empty`` nodes were rebuilt or drained and
    hold nothing the log needs; ``untrusted`` ones are being rebuilt, and
    what they say counts for nothing."""

    empty: frozenset[int] = frozenset()
    untrusted: frozenset[int] = frozenset()


#: Every node in service (no rebuilding).
NO_STANDING = Standing()


def quorum(
    nodeset: Collection[int],
    replication: int,
    answered: Iterable[int],
    standing: Standing = NO_STANDING,
) -> bool:
    """Have enough of ``nodeset`` answered to decide as if all had?

    Every copyset that may hold a record must meet the answers: at most
    R - 1 nodes that count (not ``empty``) may be silent, a node being
    rebuilt counting as silent.  Or every node but those being rebuilt
    answered (LogDevice's authoritative-incomplete): what only they held is
    gone either way, and waiting for them would stall recovery behind
    rebuilding.  Leaving the nodes being rebuilt out of the R - 1 instead
    let two silent nodes (one being rebuilt, one slow) hide a copyset: a
    recovery sealed without the one live holder of a batch lost that
    batch's producer entry, and the next append of its producer failed
    OUT_OF_SEQUENCE (the rolling rebuilding test).
    """
    counted = set(nodeset) - standing.empty
    heard = set(answered) - standing.untrusted
    if not counted & heard:
        return False  # nothing to decide from
    silent = counted - heard
    return len(silent) < replication or silent <= standing.untrusted


class EpochRecovery:
    """Decides how epoch ``epoch`` of a log ends, from the nodes' digests."""

    def __init__(
        self,
        log_id: int,
        epoch: int,
        nodeset: tuple[int, ...],
        replication: int,
        *,
        seal_epoch: int,
        lng_esn: int = 0,
        standing: Standing = NO_STANDING,
    ) -> None:
        assert 1 <= replication <= len(nodeset)
        assert epoch <= seal_epoch
        self.log_id = log_id
        self.epoch = epoch
        self.nodeset = nodeset
        self.replication = replication
        #: Rebuilding's status of the nodes: who is waited for (``quorum``).
        self.standing = standing
        self.seal_epoch = seal_epoch
        self.lng_esn = lng_esn
        self.complete: set[int] = set()
        self._best: dict[int, DigestRecord] = {}

    def on_digest(self, node_id: int, records: list[DigestRecord], *, complete: bool) -> None:
        """Records from one node's digest; ``complete`` once it has sent them all."""
        if node_id not in self.nodeset:
            return
        for rec in records:
            if rec.esn <= self.lng_esn:
                continue  # known good already: nothing to decide
            best = self._best.get(rec.esn)
            if best is None or rec.precedence > best.precedence:
                self._best[rec.esn] = rec
        if complete:
            self.complete.add(node_id)

    @property
    def ready(self) -> bool:
        """True once enough of the nodeset has sent complete digests (``quorum``)."""
        return quorum(self.nodeset, self.replication, self.complete, self.standing)

    def decide(self) -> list[Mutation]:
        """Every ESN from LNG + 1 to the bridge, in order.  Only when ``ready``."""
        assert self.ready, "decide() before an f-majority of digests"
        out: list[Mutation] = []
        # The highest ESN any digest shows, unless it is itself a bridge: a
        # bridge written by an earlier recovery ends the epoch where it is.
        bridge_at = self.lng_esn + 1
        for esn in sorted(self._best):
            rec = self._best[esn]
            if rec.flags & BRIDGE:
                bridge_at = esn
                break
            bridge_at = esn + 1
        for esn in range(self.lng_esn + 1, bridge_at):
            copy = self._best.get(esn)
            if copy is None or copy.flags & HOLE:
                out.append(Mutation(esn, Decision.HOLE))
            else:
                out.append(
                    Mutation(
                        esn,
                        Decision.RECORD,
                        copy.timestamp_ms,
                        copy.key,
                        copy.payload,
                        copy.extra,
                        copy.flags & FLAGS_APPENDED,
                    )
                )
        if bridge_at <= ESN_MAX:
            out.append(Mutation(bridge_at, Decision.BRIDGE))
        return out

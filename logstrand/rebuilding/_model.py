"""What the epoch store keeps about rebuilding, and what readers, recovery and
sequencers take from it.  Pure: no I/O.

The document (``rebuilding`` in the epoch store)::

    {"shards": {node: Shard},        # nodes that are not simply in service
     "run": Run | null,              # the rebuilding under way (one at a time)
     "last": {...} | null,           # how the last run ended
     "grace_ms": int | null,         # self-initiated rebuilding after this
     "held": {node: marker}}         # nodes that once held data: their marker

A node with no entry in ``shards`` is FULLY_AUTHORITATIVE when it is alive and
UNAVAILABLE when it is not.  Every change to the set of nodes being rebuilt
starts a new run (a higher ``run.id``): donors start over for the new set, as
LogDevice's do when its rebuilding set changes.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs


class StorageState(enum.Enum):
    """A node's authoritative status, as readers and recovery count it."""

    #: In service: what it says it lacks, it lacks.
    FULLY_AUTHORITATIVE = "FULLY_AUTHORITATIVE"
    #: Not alive and not being rebuilt: its copies may come back.
    UNAVAILABLE = "UNAVAILABLE"
    #: Its copies are being re-created elsewhere; its answers count for nothing.
    REBUILDING = "REBUILDING"
    #: Rebuilt without finding every record (too many nodes lost at once):
    #: readers wait, rather than report loss, until an operator marks the node
    #: unrecoverable.
    UNDERREPLICATION = "UNDERREPLICATION"
    #: Rebuilt or drained: holds nothing the cluster needs, not needed for an
    #: f-majority.
    AUTHORITATIVE_EMPTY = "AUTHORITATIVE_EMPTY"


class Mode(enum.Enum):
    #: The node is gone or wiped: its copies come from the other holders.
    REBUILD = "rebuild"
    #: The node stays up and serves reads while its copies go elsewhere.
    DRAIN = "drain"


@attrs.frozen
class Shard:
    """A node that is being rebuilt or drained, or was."""

    node_id: int
    mode: Mode
    #: REBUILDING (also while a drain runs: see ``storage_state``),
    #: UNDERREPLICATION or AUTHORITATIVE_EMPTY.
    state: StorageState
    since_ms: int
    #: "operator", "grace" (dead past the grace period) or "wiped" (it came
    #: back without its data).
    reason: str = "operator"
    #: An operator said its lost copies are gone for good: the rebuilding
    #: ends AUTHORITATIVE_EMPTY even when it could not find every record.
    unrecoverable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "state": self.state.value,
            "since_ms": self.since_ms,
            "reason": self.reason,
            "unrecoverable": self.unrecoverable,
        }

    @classmethod
    def from_json(cls, node_id: int, d: dict[str, Any]) -> Shard:
        return cls(
            node_id,
            Mode(d["mode"]),
            StorageState(d["state"]),
            int(d["since_ms"]),
            d["reason"],
            bool(d.get("unrecoverable", False)),
        )

    @property
    def in_progress(self) -> bool:
        return self.state is StorageState.REBUILDING


@attrs.frozen
class Run:
    """One rebuilding: the nodes it rebuilds and the donors that walk their copies."""

    id: int
    #: Every node whose copies this run re-creates (drains included).
    nodes: tuple[int, ...]
    #: The nodes that walk their copies; each reports when it is done.
    donors: tuple[int, ...]
    started_ms: int
    #: Every record kept a copy outside ``nodes`` (fewer than R of any log's
    #: copies could be among them): the run can end AUTHORITATIVE_EMPTY.
    authoritative: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "nodes": list(self.nodes),
            "donors": list(self.donors),
            "started_ms": self.started_ms,
            "authoritative": self.authoritative,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Run:
        return cls(
            int(d["id"]),
            tuple(d["nodes"]),
            tuple(d["donors"]),
            int(d["started_ms"]),
            bool(d["authoritative"]),
        )


@attrs.frozen
class DonorProgress:
    """What one donor has done in one run; persisted, so a donor that restarts
    goes on from ``logs`` (per log: every LSN up to it is handled)."""

    logs: dict[int, int] = attrs.Factory(dict)
    records: int = 0
    bytes: int = 0
    done: bool = False
    #: Records this donor led but could not place R copies of.
    short: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "logs": {str(k): v for k, v in self.logs.items()},
            "records": self.records,
            "bytes": self.bytes,
            "done": self.done,
            "short": self.short,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> DonorProgress:
        if not d:
            return cls()
        return cls(
            {int(k): int(v) for k, v in d.get("logs", {}).items()},
            int(d.get("records", 0)),
            int(d.get("bytes", 0)),
            bool(d.get("done", False)),
            int(d.get("short", 0)),
        )


@attrs.frozen
class Authority:
    """What the rebuilding state means for gap decisions and placement."""

    #: AUTHORITATIVE_EMPTY: not needed for an f-majority.
    empty: frozenset[int] = frozenset()
    #: REBUILDING or UNDERREPLICATION (not drains): a "not here" from them
    #: counts for nothing; readers and recovery need the others.
    untrusted: frozenset[int] = frozenset()
    #: Every node with an entry: no new copies go there.
    no_writes: frozenset[int] = frozenset()

    @property
    def excluded(self) -> frozenset[int]:
        """Left out of every f-majority (recovery, readers)."""
        return self.empty | self.untrusted


@attrs.frozen
class RebuildingState:
    shards: dict[int, Shard] = attrs.Factory(dict)
    run: Run | None = None
    last: dict[str, Any] | None = None
    grace_ms: int | None = None
    held: dict[int, str] = attrs.Factory(dict)
    #: Bumped by every change of the rebuilding set: the next run's id.
    next_run: int = 1

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> RebuildingState:
        if not d:
            return cls()
        return cls(
            {int(k): Shard.from_json(int(k), v) for k, v in d.get("shards", {}).items()},
            Run.from_json(d["run"]) if d.get("run") else None,
            d.get("last"),
            d.get("grace_ms"),
            {int(k): str(v) for k, v in d.get("held", {}).items()},
            int(d.get("next_run", 1)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "shards": {str(k): v.to_json() for k, v in self.shards.items()},
            "run": self.run.to_json() if self.run else None,
            "last": self.last,
            "grace_ms": self.grace_ms,
            "held": {str(k): v for k, v in self.held.items()},
            "next_run": self.next_run,
        }

    def authority(self) -> Authority:
        empty = {n for n, s in self.shards.items() if s.state is StorageState.AUTHORITATIVE_EMPTY}
        untrusted = {
            n
            for n, s in self.shards.items()
            if s.mode is Mode.REBUILD
            and s.state in (StorageState.REBUILDING, StorageState.UNDERREPLICATION)
        }
        return Authority(frozenset(empty), frozenset(untrusted), frozenset(self.shards))

    def storage_state(self, node_id: int, alive: bool) -> StorageState:
        """As ``logstrand status`` shows it: a drain under way is still
        FULLY_AUTHORITATIVE (the node has all its data and serves it)."""
        shard = self.shards.get(node_id)
        if shard is None or (shard.mode is Mode.DRAIN and shard.in_progress):
            return StorageState.FULLY_AUTHORITATIVE if alive else StorageState.UNAVAILABLE
        return shard.state

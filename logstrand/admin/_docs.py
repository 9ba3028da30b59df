"""What operators look at, as JSON documents: a node's line of ``status``,
the rebuilding under way, one log's ``info``.  Shared by the CLI (``status
--json``, ``info --json``) and the console's HTTP API, so both say the same."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..epochstore import SegmentField
from ..errors import Status

if TYPE_CHECKING:
    from collections.abc import Collection

    from ..epochstore import EpochStore, LogAttributes, LogEpochs, Member, NodeConfig
    from ..wire import LogInfoReply, NodeStatus, SeqState


def rebuilding_doc(store: EpochStore, alive: frozenset[int]) -> dict[str, Any]:
    """Each node's ``storage_state`` and the run under way, for ``status --json``."""
    st = store.rebuilding_state()
    states = {
        n: st.storage_state(n, n in alive).value
        for n, cfg in store.nodes().items()
        if "storage" in cfg.roles
    }
    run: dict[str, Any] | None = None
    if st.run is not None:
        progress = store.run_progress()
        run = {
            **st.run.to_json(),
            "modes": {str(n): st.shards[n].mode.value for n in st.run.nodes if n in st.shards},
            "donors_done": sum(p.done for p in progress.values()),
            "records": sum(p.records for p in progress.values()),
            "bytes": sum(p.bytes for p in progress.values()),
            "per_donor": {str(d): p.to_json() for d, p in progress.items()},
        }
    return {
        "storage_state": states,
        #: Nodes drained or draining (``undrain`` returns them to service).
        "drained": sorted(n for n, shard in st.shards.items() if shard.mode.value == "drain"),
        "rebuilding": run,
        "last": st.last,
        "grace_ms": st.grace_ms,
    }


def node_state(answered: bool, member: bool, st: NodeStatus | None = None) -> str:
    if answered:
        # Alive but below its free-space floor: it serves reads, takes no STOREs.
        return "no space" if st is not None and st.space_low else "alive"
    # In the membership but silent: stopped, overloaded, or just dying.
    return "unreachable" if member else "dead"


def status_row(
    node_id: int,
    cfg: NodeConfig,
    st: NodeStatus | None,
    m: Member | None,
    alive: frozenset[int],
    storage_state: str | None,
) -> dict[str, Any]:
    """One node's line of ``status``: what the epoch store and the node said
    (``st`` None: it did not answer, or is not a member)."""
    return {
        "node_id": node_id,
        "address": f"{cfg.host}:{cfg.port}",
        #: Its Kafka front's address (``--kafka-port``), or None.
        "kafka": cfg.kafka,
        #: Its console and HTTP admin API (``--http-port``), or None.
        "http": f"{cfg.host}:{cfg.http_port}" if cfg.http_port else None,
        "location": cfg.location,
        "state": node_state(st is not None, node_id in alive, st),
        "clock_offset_ms": m.clock_offset_ms if m else None,
        "takes_sequencers": m.sequencer if m else None,
        "why_not": m.why if m and not m.sequencer else None,
        "storage_state": storage_state,
        "sequencing": list(st.sequencing) if st else [],
        "partitions": st.partitions if st else None,
        "disk_bytes": st.disk_bytes if st else None,
        "logs": st.logs if st else None,
        "uptime_s": st.uptime_s if st else None,
        "corrupt_copies": st.corrupt_copies if st else None,
        "free_bytes": st.free_bytes if st else None,
        "space_low": bool(st.space_low) if st else None,
        #: Bytes LogsDB's flushes and compactions wrote over bytes of records
        #: given to it, since the node started (None: nothing written yet).
        "write_amplification": (
            round(st.disk_written / st.user_written, 2) if st and st.user_written else None
        ),
    }


def sequencer_doc(state: SeqState | None) -> dict[str, Any] | None:
    if state is None or state.status != Status.OK:
        return None
    return {
        "epoch": state.epoch,
        "recovered": state.recovered,
        "recovering_s": round(state.recovering_ms / 1000, 3),
        "stalled": state.stalled,
        "recovery_attempts_failed": state.attempts_failed,
        "recovery_error": state.error,
    }


def info_doc(
    log: int,
    attributes: LogAttributes,
    epochs: LogEpochs,
    lce: int,
    alive: Collection[int],
    compaction: dict[str, Any] | None,
    tail: int,
    infos: list[LogInfoReply],
    sequencer: int | None,
) -> dict[str, Any]:
    """``info``'s document: what the epoch store and the nodes said of the log."""
    current = epochs.current
    nodeset = list(current.nodeset) if current else []
    copies = max(1, attributes.replication_factor)
    head = max((i.trim_point for i in infos), default=0)
    doc: dict[str, Any] = {
        "log_id": log,
        "head": head,
        "tail": tail,
        "epoch": epochs.next_epoch - 1,
        "last_clean_epoch": lce,
        "sequencer_node": sequencer,
        "sequencer": None,
        "nodeset": nodeset,
        "replication_factor": attributes.replication_factor,
        "replicate_across": attributes.replicate_across,
        "retention_ms": attributes.retention_ms,
        "cleanup_policy": attributes.cleanup_policy,
        # Every node counts its copies: divided by R, and approximate.
        "records_approx": sum(i.records for i in infos) // copies,
        "bytes_approx": sum(i.bytes for i in infos) // copies,
        "oldest_timestamp_ms": min(
            (i.first_timestamp_ms for i in infos if i.first_timestamp_ms), default=0
        ),
        "newest_timestamp_ms": max((i.last_timestamp_ms for i in infos), default=0),
        "nodes_answered": len(infos),
        "nodes_alive": [n for n in nodeset if n in alive],
        # Ranges of copies the nodes found unreadable (a checksum failed) since they started.
        "corrupt_copies": sum(i.corrupt_copies for i in infos),
    }
    if attributes.compacted:
        state = compaction or {}
        total = doc["bytes_approx"]
        clean = int(state.get("clean_bytes", 0))
        doc["compaction"] = {
            "clean_point": int(state.get("clean_point", 0)),
            "dirty_ratio": round(max(0, total - clean) / total, 3) if total else 0.0,
            "min_cleanable_ratio": attributes.min_cleanable_ratio,
            "passes": int(state.get("passes", 0)),
            "last_pass": state.get("last_pass"),
        }
    return doc


def tier_doc(attributes: LogAttributes, point: int, segments: list[list[Any]]) -> dict[str, Any]:
    """A tiered log's part of ``info``: its tiered point, and what the
    objects below it hold (as the epoch store records them; each segment
    is ``[first, last, key, bytes, crc, records]``, ``SegmentField``)."""
    return {
        "tier_after_ms": attributes.tier_after_ms,
        "local_retention_ms": attributes.local_retention_ms,
        "local_retention_bytes": attributes.local_retention_bytes,
        "tiered_point": point,
        "objects": len(segments),
        "tiered_bytes": sum(int(s[SegmentField.BYTES]) for s in segments),
        "tiered_records": sum(int(s[SegmentField.RECORDS]) for s in segments),
        "first_tiered_lsn": int(segments[0][SegmentField.FIRST]) if segments else 0,
    }

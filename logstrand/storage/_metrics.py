"""A node's Prometheus metrics (one registry per node).

The metrics are a table: each row of ``NodeMetrics`` declares one (its
attribute, kind, name, help and labels); a node's instance makes them all in
its own registry.  docs/operations.md lists them.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

M = TypeVar("M", Counter, Gauge, Histogram)


class _Declared(Generic[M]):
    """One row of the table: made per node by ``NodeMetrics.__init__``."""

    def __init__(self, kind: type[M], name: str, help: str, **extra: Any) -> None:
        self.kind: type[M] = kind
        self.name, self.help = name, help
        self.labels: tuple[str, ...] = extra.pop("labels", ())
        self.extra = extra
        self.attr = ""

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def make(self, registry: CollectorRegistry) -> M:
        made: M = self.kind(self.name, self.help, self.labels, registry=registry, **self.extra)
        return made

    @overload
    def __get__(self, obj: None, owner: type) -> _Declared[M]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> M: ...
    def __get__(self, obj: object | None, owner: type) -> _Declared[M] | M:
        if obj is None:
            return self
        raise AttributeError(f"{self.attr} is made by NodeMetrics.__init__")


def _declare(kind: type[M], name: str, help: str, **extra: Any) -> _Declared[M]:
    return _Declared(kind, name, help, **extra)


class NodeMetrics:
    appends = _declare(Counter, "logstrand_appends", "APPEND requests handled by sequencers")
    append_records = _declare(
        Counter, "logstrand_append_records", "Records appended through this node's sequencers"
    )
    append_bytes = _declare(
        Counter, "logstrand_append_bytes", "Payload bytes appended through this node"
    )
    append_errors = _declare(
        Counter, "logstrand_append_errors", "APPENDs refused or failed", labels=("status",)
    )
    stores = _declare(Counter, "logstrand_stores", "STORE messages received")
    store_records = _declare(Counter, "logstrand_store_records", "Record copies stored")
    store_bytes = _declare(Counter, "logstrand_store_bytes", "Payload bytes stored")
    group_commits = _declare(
        Counter, "logstrand_group_commits", "RocksDB writes (one per group commit)"
    )
    group_commit_seconds = _declare(
        Histogram,
        "logstrand_group_commit_seconds",
        "Time of one group-committed RocksDB write",
        buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
    )
    sequencer_activations = _declare(
        Counter, "logstrand_sequencer_activations", "Sequencers activated on this node"
    )
    seals = _declare(Counter, "logstrand_seals", "Older epochs sealed by sequencers activated here")
    recovery_seconds = _declare(
        Histogram,
        "logstrand_recovery_seconds",
        "Time to recover the earlier epochs of a log after activation",
        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    )
    recovery_attempts_failed = _declare(
        Counter,
        "logstrand_recovery_attempts_failed",
        "Recovery attempts that failed and were tried again",
    )
    recovery_stalls = _declare(
        Counter,
        "logstrand_recovery_stalls",
        "Recoveries that did not finish within --recovery-stall",
    )
    recovery_stalled = _declare(
        Gauge,
        "logstrand_recovery_stalled",
        "Logs whose sequencer here is past --recovery-stall without having recovered (their "
        "appends are refused)",
    )
    activations_waiting = _declare(
        Gauge,
        "logstrand_activations_waiting",
        "Sequencer activations waiting for a turn (--activations-in-flight run at once)",
    )
    releases_overdue = _declare(
        Gauge,
        "logstrand_releases_overdue",
        "Logs with copies here that stay unreleased past the watch's bound (their sequencer "
        "died or stalls; the node asks the log's owner)",
    )
    clock_offset = _declare(
        Gauge,
        "logstrand_clock_offset_seconds",
        "This node's wall clock minus the cluster's, as the membership measures it",
    )
    nodes_dead = _declare(
        Gauge,
        "logstrand_nodes_dead",
        "Members this node's failure detector finds dead (no word for --dead-after)",
    )
    takes_sequencers = _declare(
        Gauge,
        "logstrand_takes_sequencers",
        "1 while this node takes sequencers; 0 while its clock is off or it is in its hold-down",
    )
    sequencers = _declare(Gauge, "logstrand_sequencers", "Sequencers running on this node")
    store_waves_retried = _declare(
        Counter, "logstrand_store_waves_retried", "STORE waves sent again after a failure"
    )
    trims = _declare(Counter, "logstrand_trims", "Trim points moved on this node")
    compaction_records_removed = _declare(
        Counter,
        "logstrand_compaction_records_removed",
        "Record copies this node removed for compaction",
    )
    compaction_bytes_removed = _declare(
        Counter,
        "logstrand_compaction_bytes_removed",
        "Payload bytes of the copies this node removed for compaction",
    )
    compaction_passes = _declare(
        Counter, "logstrand_compaction_passes", "Compaction passes this node's cleaner finished"
    )
    compaction_map_fill = _declare(
        Gauge,
        "logstrand_compaction_map_fill",
        "How full the offset map of the last pass was (0..1)",
    )
    compaction_uncleanable = _declare(
        Counter,
        "logstrand_compaction_uncleanable",
        "Passes that could not finish, by reason",
        labels=("reason",),
    )
    partitions_dropped = _declare(
        Counter,
        "logstrand_partitions_dropped",
        "LogsDB partitions dropped once all their records were trimmed",
    )
    partitions_merged = _declare(
        Counter,
        "logstrand_partitions_merged",
        "Old partitions of many small files merged into a few large ones",
    )
    read_streams = _declare(Gauge, "logstrand_read_streams", "Read streams open on this node")
    read_records = _declare(Counter, "logstrand_read_records", "Records sent to readers")
    read_messages = _declare(
        Counter, "logstrand_read_messages", "Read messages sent to readers (with records or not)"
    )
    read_bytes = _declare(Counter, "logstrand_read_bytes", "Payload bytes sent to readers")
    read_gaps = _declare(
        Counter,
        "logstrand_read_gaps",
        "Gaps this node showed readers: hole and bridge records sent, and read streams that "
        "started below the trim point",
        labels=("type",),
    )
    corrupt_copies = _declare(
        Counter,
        "logstrand_corrupt_copies",
        "Ranges of stored copies found unreadable (a checksum failed) and reported to readers",
    )
    connections = _declare(
        Gauge, "logstrand_connections", "Connections accepted and open on this node"
    )
    connections_refused = _declare(
        Counter,
        "logstrand_connections_refused",
        "Connections closed at once, by reason (limit, per_peer_limit, per_user_limit)",
        labels=("reason",),
    )
    connections_cut = _declare(
        Counter,
        "logstrand_connections_cut",
        "Open connections this node ended: idle, slow reader, a frame too slow, handler failure",
    )
    receive_held = _declare(
        Gauge,
        "logstrand_receive_held_bytes",
        "Bytes held of what peers sent (frames coming in, requests not yet answered), per pool "
        "(clients, nodes); bounded by --receive-budget",
        labels=("pool",),
    )
    receive_held_peak = _declare(
        Gauge,
        "logstrand_receive_held_peak_bytes",
        "The most bytes ever held at once of what peers sent, per pool",
        labels=("pool",),
    )
    requests_abandoned = _declare(
        Counter,
        "logstrand_requests_abandoned",
        "Requests left unanswered so long that their connection stopped counting them",
    )
    refused = _declare(
        Counter,
        "logstrand_messages_refused",
        "Messages refused at dispatch, by reason (access, nonsense, credentials, limit, "
        "unchecked: the epoch store could not be reached to check; answered AGAIN)",
        labels=("reason",),
    )
    background_passes = _declare(
        Gauge,
        "logstrand_background_passes",
        "Background passes running (DropCopies), bounded by --background-passes",
    )
    free_bytes = _declare(
        Gauge, "logstrand_free_bytes", "Free bytes of the data directory's file system"
    )
    space_low = _declare(
        Gauge,
        "logstrand_space_low",
        "1 while the node refuses STOREs for want of space (--min-free, or a failed write)",
    )
    background_failures = _declare(
        Counter,
        "logstrand_background_failures",
        "Failures of a node's background tasks (each logged, then the task runs again)",
        labels=("task",),
    )
    rebuild_records = _declare(
        Counter, "logstrand_rebuilding_records", "Record copies this donor re-created"
    )
    rebuild_bytes = _declare(
        Counter, "logstrand_rebuilding_bytes", "Bytes of copies this donor re-created"
    )
    rebuild_short = _declare(
        Counter, "logstrand_rebuilding_short", "Copies this donor led but found no node to place on"
    )
    rebuild_seconds = _declare(
        Gauge,
        "logstrand_rebuilding_seconds",
        "Duration of the last rebuilding run that ended (from its start to its end)",
    )
    storage_states = _declare(
        Gauge,
        "logstrand_nodes_in_state",
        "Nodes in each authoritative status, as this node sees them",
        labels=("state",),
    )
    partitions = _declare(Gauge, "logstrand_partitions", "LogsDB partitions")
    disk_bytes = _declare(Gauge, "logstrand_disk_bytes", "LogsDB directory size")
    logsdb_written = _declare(
        Gauge,
        "logstrand_logsdb_written_bytes",
        "Bytes LogsDB wrote since the node started, by kind: user (records given "
        "to it), wal, flush, compaction, blob (of flush and compaction)",
        labels=("kind",),
    )
    write_amplification = _declare(
        Gauge,
        "logstrand_logsdb_write_amplification",
        "Bytes flushes and compactions wrote over bytes of records given to LogsDB "
        "since the node started (1.0: each written once)",
    )
    gc_seconds = _declare(
        Histogram,
        "logstrand_gc_seconds",
        "Pauses of the loop for Python's garbage collector, by generation",
        labels=("generation",),
        buckets=(0.001, 0.005, 0.02, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    )
    gc_frozen = _declare(
        Gauge,
        "logstrand_gc_frozen_objects",
        "Objects frozen after full collections (never scanned again)",
    )
    node_info = _declare(Gauge, "logstrand_node_info", "Node id", labels=("node",))

    def __init__(self, node_id: int) -> None:
        self.registry = CollectorRegistry()
        for row in vars(NodeMetrics).values():
            if isinstance(row, _Declared):
                self.__dict__[row.attr] = row.make(self.registry)
        self.node_info.labels(node=str(node_id)).set(1)

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """Serve /metrics on host:port from a background thread; returns the server."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server

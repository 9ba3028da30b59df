"""A node's Prometheus metrics (one registry per node)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class NodeMetrics:
    def __init__(self, node_id: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        label = {"node": str(node_id)}
        self.appends = Counter(
            "logstrand_appends", "APPEND requests handled by sequencers", registry=r
        )
        self.append_records = Counter(
            "logstrand_append_records",
            "Records appended through this node's sequencers",
            registry=r,
        )
        self.append_bytes = Counter(
            "logstrand_append_bytes", "Payload bytes appended through this node", registry=r
        )
        self.append_errors = Counter(
            "logstrand_append_errors", "APPENDs refused or failed", ["status"], registry=r
        )
        self.stores = Counter("logstrand_stores", "STORE messages received", registry=r)
        self.store_records = Counter("logstrand_store_records", "Record copies stored", registry=r)
        self.store_bytes = Counter("logstrand_store_bytes", "Payload bytes stored", registry=r)
        self.group_commits = Counter(
            "logstrand_group_commits", "RocksDB writes (one per group commit)", registry=r
        )
        self.group_commit_seconds = Histogram(
            "logstrand_group_commit_seconds",
            "Time of one group-committed RocksDB write",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
            registry=r,
        )
        self.sequencer_activations = Counter(
            "logstrand_sequencer_activations", "Sequencers activated on this node", registry=r
        )
        self.seals = Counter(
            "logstrand_seals", "Older epochs sealed by sequencers activated here", registry=r
        )
        self.recovery_seconds = Histogram(
            "logstrand_recovery_seconds",
            "Time to recover the earlier epochs of a log after activation",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )
        self.recovery_attempts_failed = Counter(
            "logstrand_recovery_attempts_failed",
            "Recovery attempts that failed and were tried again",
            registry=r,
        )
        self.recovery_stalls = Counter(
            "logstrand_recovery_stalls",
            "Recoveries that did not finish within --recovery-stall",
            registry=r,
        )
        self.recovery_stalled = Gauge(
            "logstrand_recovery_stalled",
            "Logs whose sequencer here is past --recovery-stall without having recovered "
            "(their appends are refused)",
            registry=r,
        )
        self.releases_overdue = Gauge(
            "logstrand_releases_overdue",
            "Logs with copies here that stay unreleased past the watch's bound "
            "(their sequencer died or stalls; the node asks the log's owner)",
            registry=r,
        )
        self.clock_offset = Gauge(
            "logstrand_clock_offset_seconds",
            "This node's wall clock minus the cluster's, as the membership measures it",
            registry=r,
        )
        self.nodes_dead = Gauge(
            "logstrand_nodes_dead",
            "Members this node's failure detector finds dead (no word for --dead-after)",
            registry=r,
        )
        self.takes_sequencers = Gauge(
            "logstrand_takes_sequencers",
            "1 while this node takes sequencers; 0 while its clock is off or it is in its "
            "hold-down",
            registry=r,
        )
        self.sequencers = Gauge(
            "logstrand_sequencers", "Sequencers running on this node", registry=r
        )
        self.store_waves_retried = Counter(
            "logstrand_store_waves_retried", "STORE waves sent again after a failure", registry=r
        )
        self.trims = Counter("logstrand_trims", "Trim points moved on this node", registry=r)
        self.compaction_records_removed = Counter(
            "logstrand_compaction_records_removed",
            "Record copies this node removed for compaction",
            registry=r,
        )
        self.compaction_bytes_removed = Counter(
            "logstrand_compaction_bytes_removed",
            "Payload bytes of the copies this node removed for compaction",
            registry=r,
        )
        self.compaction_passes = Counter(
            "logstrand_compaction_passes",
            "Compaction passes this node's cleaner finished",
            registry=r,
        )
        self.compaction_map_fill = Gauge(
            "logstrand_compaction_map_fill",
            "How full the offset map of the last pass was (0..1)",
            registry=r,
        )
        self.compaction_uncleanable = Counter(
            "logstrand_compaction_uncleanable",
            "Passes that could not finish, by reason",
            ["reason"],
            registry=r,
        )
        self.partitions_dropped = Counter(
            "logstrand_partitions_dropped",
            "LogsDB partitions dropped once all their records were trimmed",
            registry=r,
        )
        self.read_streams = Gauge(
            "logstrand_read_streams", "Read streams open on this node", registry=r
        )
        self.read_records = Counter("logstrand_read_records", "Records sent to readers", registry=r)
        self.read_bytes = Counter(
            "logstrand_read_bytes", "Payload bytes sent to readers", registry=r
        )
        self.read_gaps = Counter(
            "logstrand_read_gaps",
            "Gaps this node showed readers: hole and bridge records sent, and read "
            "streams that started below the trim point",
            ["type"],
            registry=r,
        )
        self.corrupt_copies = Counter(
            "logstrand_corrupt_copies",
            "Ranges of stored copies found unreadable (a checksum failed) and reported to readers",
            registry=r,
        )
        self.connections = Gauge(
            "logstrand_connections", "Connections accepted and open on this node", registry=r
        )
        self.connections_refused = Counter(
            "logstrand_connections_refused",
            "Connections closed at once, by reason (limit, per_peer_limit, per_user_limit)",
            ["reason"],
            registry=r,
        )
        self.connections_cut = Counter(
            "logstrand_connections_cut",
            "Open connections this node ended: idle, slow reader, a frame too slow, "
            "handler failure",
            registry=r,
        )
        self.receive_held = Gauge(
            "logstrand_receive_held_bytes",
            "Bytes held of what peers sent (frames coming in, requests not yet answered), "
            "per pool (clients, nodes); bounded by --receive-budget",
            ["pool"],
            registry=r,
        )
        self.receive_held_peak = Gauge(
            "logstrand_receive_held_peak_bytes",
            "The most bytes ever held at once of what peers sent, per pool",
            ["pool"],
            registry=r,
        )
        self.requests_abandoned = Counter(
            "logstrand_requests_abandoned",
            "Requests left unanswered so long that their connection stopped counting them",
            registry=r,
        )
        self.refused = Counter(
            "logstrand_messages_refused",
            "Messages refused at dispatch, by reason (access, nonsense, credentials, limit, "
            "unchecked: the epoch store could not be reached to check; answered AGAIN)",
            ["reason"],
            registry=r,
        )
        self.background_passes = Gauge(
            "logstrand_background_passes",
            "Background passes running (DropCopies), bounded by --background-passes",
            registry=r,
        )
        self.free_bytes = Gauge(
            "logstrand_free_bytes", "Free bytes of the data directory's file system", registry=r
        )
        self.space_low = Gauge(
            "logstrand_space_low",
            "1 while the node refuses STOREs for want of space (--min-free, or a failed write)",
            registry=r,
        )
        self.background_failures = Counter(
            "logstrand_background_failures",
            "Failures of a node's background tasks (each logged, then the task runs again)",
            ["task"],
            registry=r,
        )
        self.rebuild_records = Counter(
            "logstrand_rebuilding_records", "Record copies this donor re-created", registry=r
        )
        self.rebuild_bytes = Counter(
            "logstrand_rebuilding_bytes", "Bytes of copies this donor re-created", registry=r
        )
        self.rebuild_short = Counter(
            "logstrand_rebuilding_short",
            "Copies this donor led but found no node to place on",
            registry=r,
        )
        self.rebuild_seconds = Gauge(
            "logstrand_rebuilding_seconds",
            "Duration of the last rebuilding run that ended (from its start to its end)",
            registry=r,
        )
        self.storage_states = Gauge(
            "logstrand_nodes_in_state",
            "Nodes in each authoritative status, as this node sees them",
            ["state"],
            registry=r,
        )
        self.partitions = Gauge("logstrand_partitions", "LogsDB partitions", registry=r)
        self.disk_bytes = Gauge("logstrand_disk_bytes", "LogsDB directory size", registry=r)
        self.node_info = Gauge("logstrand_node_info", "Node id", list(label), registry=r)
        self.node_info.labels(**label).set(1)

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """Serve /metrics on host:port from a background thread; returns the server."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server

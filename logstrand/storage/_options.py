"""A storage node's options.

Each option an operator sets is declared once, here: its field carries its
flag, its help, its kind and its bounds (``option``), and ``logstrand node``
makes its command-line options, its configuration file keys and their checks
from these declarations (``cli._node_options``).  Fields without a flag are
for tests and for code that builds a node in process.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from ..idempotence import EXPIRY_MS
from ..records import ESN_MAX, PAYLOAD_BYTES_MAX

if TYPE_CHECKING:
    from ..security import TlsFiles

#: How an option is typed: seconds (a float), a whole number, a duration
#: (``7d``, in ms) or a size (``64MiB``, in bytes).
Kind = Literal["seconds", "int", "duration", "size"]
KiB: Final = 1024
MiB: Final = 1024 * KiB


def option(
    default: Any,
    flag: str,
    kind: Kind,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
) -> Any:
    """A field that ``logstrand node`` offers as ``flag`` (see the module docstring)."""
    meta = {"flag": flag, "kind": kind, "help": help, "low": low, "high": high}
    return attrs.field(default=default, metadata=meta)


def _ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def default_receive_budget() -> int:
    """128 MiB, or a sixteenth of the machine's memory when that is less (at
    least 32 MiB).  The budget is what clients may make the node hold of
    frames they have not finished: it bounds memory, not speed (appends at
    full speed hold a few MiB), so it does not grow with the machine (a
    sixteenth of 24 GiB let 60 connections of partial frames hold 1.5 GiB)."""
    return max(32 * MiB, min(128 * MiB, _ram() // 16))


def default_node_receive_budget() -> int:
    """A sixteenth of the machine's memory, 64 MiB to 2 GiB: what other nodes
    may make the node hold.  Nodes are authenticated by their certificates
    (and an insecure cluster trusts its network), and their STOREs carry
    every copy and every rebuilt record, so their pool stays wide."""
    return max(64 * MiB, min(2 * 1024**3, _ram() // 16))


@attrs.frozen
class NodeOptions:
    payload_bytes_max: int = PAYLOAD_BYTES_MAX
    #: One group commit takes at most this much from the store queue.
    group_commit_records_max: int = 50_000
    group_commit_bytes_max: int = 32 * MiB
    store_queue_max: int = 4096
    sequencer_appenders_max: int = 1024
    activations_in_flight_max: int = option(
        64,
        "--activations-in-flight",
        "int",
        "Sequencer activations this node runs at once (each takes an epoch and seals "
        "the log's nodeset); more wait their turn in order, their appends with them.",
        low=1,
        high=65536,
    )
    esn_max: int = option(
        ESN_MAX,
        "--esn-max",
        "int",
        "The highest ESN of an epoch; past it the log moves to a new epoch (lower it only "
        "to test that boundary).",
        low=1,
        high=ESN_MAX,
    )
    clock_skew_max_ms: int = option(
        5_000,
        "--clock-skew-max",
        "duration",
        "A node whose clock is further than this from the cluster's takes no sequencers and "
        "applies no retention by time until it is back (docs/operations.md).",
        low=1,
    )
    sequencer_handoff_s: float = option(
        30.0,
        "--handoff-timeout",
        "seconds",
        "Seconds a node told to stop (SIGTERM) spends ending its sequencers' epochs, so that "
        "their next sequencers recover nothing; 0: stop at once, as after a crash.",
        low=0.0,
    )
    sequencer_hold_down_s: float = option(
        30.0,
        "--sequencer-hold-down",
        "seconds",
        "Seconds a node that comes back (restarted into a running cluster, paused, cut off) "
        "waits in health before it takes sequencers again: each move costs an epoch.  None "
        "after a stop that handed its logs off (--handoff-timeout).",
        low=0.0,
    )
    gossip_s: float = option(
        0.25,
        "--gossip-interval",
        "seconds",
        "Seconds between this node's gossips to other nodes (the failure detector).",
        low=0.01,
    )
    dead_after_s: float = option(
        3.0,
        "--dead-after",
        "seconds",
        "Seconds without word of a member before the nodes take it as dead and route around "
        "it (its session may last longer: 10 s on ZooKeeper).",
        low=0.1,
    )
    store_timeout_s: float = 2.0
    producer_expiry_ms: int = option(
        EXPIRY_MS,
        "--producer-expiry",
        "duration",
        "An idempotent producer idle this long on a log is forgotten there (its next append "
        "fails with UNKNOWN_PRODUCER).",
        low=1,
    )
    #: How long a new sequencer waits for an f-majority to seal older epochs.
    seal_timeout_s: float = 3.0
    tick_s: float = 0.05
    release_persist_s: float = 1.0
    recovery_grace_s: float = option(
        0.0,
        "--recovery-grace",
        "seconds",
        "Seconds a new sequencer waits before recovering earlier epochs (it takes appends "
        "meanwhile; tests kill it in the middle of its recovery).",
        low=0.0,
    )
    recovery_stall_s: float = option(
        10.0,
        "--recovery-stall",
        "seconds",
        "Seconds a new sequencer may take to recover earlier epochs before it reports the log "
        "stalled (error log, metric, `logstrand info`) and refuses appends until it has.",
        low=0.1,
    )
    #: Free space the data directory's file system keeps: below it the node
    #: refuses STOREs (NOSPC) and serves reads only.  Bytes, and a fraction
    #: of the file system's size; the larger counts (``--min-free``).
    min_free_bytes: int = 0
    min_free_fraction: float = 0.0
    #: How often the node looks at its free space.
    space_check_s: float = 1.0
    maintenance_s: float = option(
        10.0,
        "--maintenance-interval",
        "seconds",
        "Seconds between applying missed trims and retention, and dropping partitions whose "
        "records are all trimmed.",
        low=0.05,
    )
    rebuild_rate_bytes: int = option(
        0,
        "--rebuild-rate",
        "size",
        "Bytes a second of new copies this node sends as a rebuilding donor (0: no limit).",
    )
    rebuild_poll_s: float = 1.0
    rebuild_settle_s: float = option(
        5.0,
        "--rebuild-settle",
        "seconds",
        "Seconds donors wait after they first see a rebuilding, for every sequencer to stop "
        "placing copies on the nodes being rebuilt (the cluster view's refresh is 2 s).",
        low=0.0,
    )
    # -- the trust boundary (docs/security.md) ------------------------------------
    #: TLS on every connection, node certificates, and permissions.  None: no
    #: TLS, every peer trusted (a trusted network only).
    tls: TlsFiles | None = None
    connections_max: int = option(
        4096,
        "--max-connections",
        "int",
        "Connections open at once; more are closed at accept.",
        low=16,
    )
    connections_per_peer_max: int = option(
        2048,
        "--max-connections-per-peer",
        "int",
        "Connections open at once from one address.",
        low=4,
    )
    handshake_s: float = option(
        3.0,
        "--handshake-timeout",
        "seconds",
        "Seconds a new connection has for TLS and Hello.",
        low=0.1,
    )
    idle_s: float = option(
        600.0,
        "--idle-timeout",
        "seconds",
        "Seconds a connection with no read stream and no request being worked on may stay silent.",
        low=1.0,
    )
    send_queue_bytes: int = option(
        64 * MiB,
        "--send-queue",
        "size",
        "Bytes queued to send on one connection before its peer is throttled (its requests "
        "are not read) and, after 10 s more, cut.",
        low=KiB,
    )
    send_budget_bytes: int = option(
        256 * MiB,
        "--send-budget",
        "size",
        "Bytes queued to send on all connections of the node together.",
        low=KiB,
    )
    send_stall_s: float = 10.0
    #: 0: ``default_receive_budget()`` (``receive_budget``).
    receive_budget_bytes: int = option(
        0,
        "--receive-budget",
        "size",
        "Bytes the node holds of what clients sent (frames coming in, requests not yet "
        "answered), all together; past it connections wait to be read. 0: 128MiB, or 1/16 "
        "of RAM when less (at least 32MiB).",
    )
    #: 0: ``default_node_receive_budget()`` (``node_receive_budget``).
    node_receive_budget_bytes: int = option(
        0,
        "--node-receive-budget",
        "size",
        "The same for what other nodes sent (STOREs, rebuilding), a pool of its own so "
        "that clients never hold up the copies their appends wait for. 0: 1/16 of RAM, "
        "64MiB to 2GiB.",
    )
    requests_per_connection: int = option(
        128,
        "--requests-per-connection",
        "int",
        "Requests one connection may have unanswered; at that many it is not read until "
        "replies go out.",
        low=1,
    )
    request_bytes_per_connection: int = option(
        512 * KiB,
        "--request-bytes-per-connection",
        "size",
        "Bytes of unanswered requests one connection may have (one request larger than this "
        "is taken alone).",
        low=KiB,
    )
    frame_min_rate: int = option(
        MiB,
        "--frame-min-rate",
        "size",
        "A frame must arrive within 10 s plus its size at this rate (bytes a second), or its "
        "connection is closed.",
        low=KiB,
    )
    connections_per_user_max: int = option(
        256,
        "--user-connections",
        "int",
        "In secure mode: connections one user may have open.",
        low=1,
    )
    #: 0: a quarter of the receive budget (``user_bytes``).
    bytes_per_user_max: int = option(
        0,
        "--user-bytes",
        "size",
        "In secure mode: bytes one user's connections may hold together (0: a quarter of "
        "--receive-budget).",
    )
    read_streams_per_connection: int = option(
        16_384,
        "--read-streams-per-connection",
        "int",
        "Read streams one connection may have open (an idle one costs about a KiB).",
        low=1,
    )
    #: Records of credit a reader may grant one stream (more is capped).
    read_credit_max: int = 1 << 20
    background_passes_max: int = option(
        4,
        "--background-passes",
        "int",
        "Compaction drop passes running at once on this node.",
        low=1,
    )

    @property
    def receive_budget(self) -> int:
        """Bytes of what clients sent the node may hold."""
        return self.receive_budget_bytes or default_receive_budget()

    @property
    def node_receive_budget(self) -> int:
        """Bytes of what other nodes sent the node may hold."""
        return self.node_receive_budget_bytes or default_node_receive_budget()

    @property
    def user_bytes(self) -> int:
        """Bytes one user's connections may hold together (secure mode)."""
        return self.bytes_per_user_max or self.receive_budget // 4


def declared() -> list[attrs.Attribute[Any]]:
    """The options ``logstrand node`` offers, in declaration order."""
    return [a for a in attrs.fields(NodeOptions) if "flag" in a.metadata]

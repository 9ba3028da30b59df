"""A storage node's options (``logstrand node`` sets them from its flags)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from ..producers import EXPIRY_MS
from ..records import ESN_MAX, PAYLOAD_BYTES_MAX

if TYPE_CHECKING:
    from ..security import TlsFiles


def default_receive_budget() -> int:
    """A sixteenth of the machine's memory, between 64 MiB and 2 GiB."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 8 * 1024**3
    return max(64 * 1024**2, min(2 * 1024**3, ram // 16))


@attrs.frozen
class NodeOptions:
    payload_bytes_max: int = PAYLOAD_BYTES_MAX
    #: One group commit takes at most this much from the store queue.
    group_commit_records_max: int = 50_000
    group_commit_bytes_max: int = 32 * 1024 * 1024
    store_queue_max: int = 4096
    sequencer_appenders_max: int = 1024
    #: The highest ESN an epoch hands out before the log moves to a new epoch
    #: (2^32 - 1; tests lower it to reach the boundary).
    esn_max: int = ESN_MAX
    #: A clock further than this from the cluster's takes no sequencers and
    #: applies no retention by time (``--clock-skew-max``; docs/operations.md).
    clock_skew_max_ms: int = 5_000
    #: A node that comes back takes sequencers after this long in health
    #: (``--sequencer-hold-down``): each move of a sequencer costs an epoch.
    sequencer_hold_down_s: float = 30.0
    #: The failure detector (``_detector``): gossip this often; a member
    #: nobody has had word of this long is dead to routing.
    gossip_s: float = 0.25
    dead_after_s: float = 3.0
    store_timeout_s: float = 2.0
    #: An idempotent producer idle this long on a log is forgotten there: its
    #: next append gets UNKNOWN_PRODUCER (``--producer-expiry``).
    producer_expiry_ms: int = EXPIRY_MS
    #: How long a new sequencer waits for an f-majority to seal older epochs.
    seal_timeout_s: float = 3.0
    tick_s: float = 0.05
    release_persist_s: float = 1.0
    #: A new sequencer waits this long before it recovers the earlier epochs
    #: (it takes appends meanwhile, and releases them after).  Tests use it to
    #: kill a sequencer in the middle of its recovery.
    recovery_grace_s: float = 0.0
    #: A sequencer whose recovery of the earlier epochs has not finished this
    #: long after activation is *stalled*: it logs an error, counts it, shows
    #: it in ``logstrand info``, and refuses appends (NOTREADY) until done.
    recovery_stall_s: float = 10.0
    #: Free space the data directory's file system keeps: below it the node
    #: refuses STOREs (NOSPC) and serves reads only.  Bytes, and a fraction
    #: of the file system's size; the larger counts.
    min_free_bytes: int = 0
    min_free_fraction: float = 0.0
    #: How often the node looks at its free space.
    space_check_s: float = 1.0
    #: How often the node applies trims it missed, retention, and drops
    #: partitions whose records are all trimmed.
    maintenance_s: float = 10.0
    #: Rebuilding (docs/rebuilding.md): the bytes per second of new copies
    #: this node sends as a donor (``--rebuild-rate``; 0: no limit), how often
    #: it looks at the rebuilding state, and how long after a run starts
    #: donors wait so that every sequencer has stopped placing copies on the
    #: nodes being rebuilt (two refreshes of the cluster view).
    rebuild_rate_bytes: int = 0
    rebuild_poll_s: float = 1.0
    rebuild_settle_s: float = 5.0
    # -- the trust boundary (docs/security.md) ------------------------------------
    #: TLS on every connection, node certificates, and permissions.  None: no
    #: TLS, every peer trusted (a trusted network only).
    tls: TlsFiles | None = None
    #: Connections open at once; more are closed at accept.
    connections_max: int = 4096
    #: Connections open at once from one address.
    connections_per_peer_max: int = 2048
    #: A connection must finish TLS and ``Hello`` within this.
    handshake_s: float = 3.0
    #: A connection that sent nothing this long, with no read stream open, is closed.
    idle_s: float = 600.0
    #: Bytes queued to send on one connection; a peer that lets more pile up
    #: is throttled (its requests are not read) and cut after ``send_stall_s``.
    send_queue_bytes: int = 64 * 1024 * 1024
    #: Bytes queued on all connections together (past it, connections with
    #: something queued wait for their queue to drain).
    send_budget_bytes: int = 256 * 1024 * 1024
    send_stall_s: float = 10.0
    #: Bytes the node holds of what clients sent (frames coming in, requests
    #: not yet answered), all connections together; past it, connections
    #: are not read until some is freed (``net._intake``).  Connections from
    #: other nodes have a budget of the same size of their own.
    receive_budget_bytes: int = attrs.field(factory=lambda: default_receive_budget())
    #: Requests one connection may have unanswered, and their bytes: a
    #: connection at either is not read until replies go out.
    requests_per_connection: int = 128
    request_bytes_per_connection: int = 512 * 1024
    #: A frame must come within 10 s plus its size at this rate (bytes/s).
    frame_min_rate: int = 1024 * 1024
    #: In secure mode, per user: connections open at once, and bytes held
    #: over all of them.
    connections_per_user_max: int = 256
    bytes_per_user_max: int = attrs.field(factory=lambda: default_receive_budget() // 4)
    #: Read streams one connection may have open.
    read_streams_per_connection: int = 256
    #: Records of credit a reader may grant one stream (more is capped).
    read_credit_max: int = 1 << 20
    #: DropCopies passes running at once; more are refused (OVERLOADED).
    background_passes_max: int = 4

"""``logstrand node``: run one storage node, from options or a TOML file.

A configuration file holds the same options as the command line, keyed by
their names (``data_dir`` or ``data-dir``; ``id`` for ``--id``); what the
command line gives wins.  ``--print-config`` shows what the node would run
with.  docs/deploy.md has a whole file and a systemd unit (``deploy/``).
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Annotated

import trio
import typer

from ..records import ESN_MAX
from ._common import UrlOption, duration_option, fail, parse_node_id, require_url, size_option
from ._node_setup import (
    LEVELS,
    config_toml,
    host_port,
    load_config,
    parse_min_free,
    setup_logging,
)


def node(
    ctx: typer.Context,
    node_id: Annotated[
        int,
        typer.Option("--id", help="This node's id in the configuration.", parser=parse_node_id),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A TOML file of these options, keyed by their names (data_dir or "
            "data-dir; id for --id); options on the command line win over it.",
            is_eager=True,
            callback=load_config,
        ),
    ] = None,
    print_config: Annotated[
        bool,
        typer.Option("--print-config", help="Print the effective configuration as TOML and exit."),
    ] = False,
    url: UrlOption = None,
    listen: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT to listen on, e.g. 0.0.0.0:4440 (default: the address in "
            "the cluster configuration).",
        ),
    ] = None,
    advertise: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT clients and the other nodes reach this node at; written to "
            "the cluster configuration at start when it differs from it.",
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT of the Prometheus endpoint /metrics (default: 127.0.0.1 and "
            "the configuration's metrics port; none when that is unset).",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    log_format: Annotated[
        str, typer.Option(help="text, or json: one JSON object a line.")
    ] = "text",
    data_dir: Annotated[
        str | None, typer.Option(help="LogsDB directory (default: from the configuration).")
    ] = None,
    profile: Annotated[
        Path | None, typer.Option(help="Write a cProfile of the node's run to this file.")
    ] = None,
    partition_duration: Annotated[
        str,
        typer.Option(help="Start a new LogsDB partition when the newest is this old."),
    ] = "15m",
    maintenance_interval: Annotated[
        float,
        typer.Option(
            min=0.05,
            help="Seconds between applying missed trims and retention, and dropping "
            "partitions whose records are all trimmed.",
        ),
    ] = 10.0,
    recovery_grace: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds a new sequencer waits before recovering earlier epochs (for tests).",
        ),
    ] = 0.0,
    recovery_stall: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds a new sequencer may take to recover earlier epochs before it "
            "reports the log stalled (error log, metric, `logstrand info`) and refuses "
            "appends until it has.",
        ),
    ] = 10.0,
    esn_max: Annotated[
        int,
        typer.Option(
            min=1,
            max=ESN_MAX,
            help="The highest ESN of an epoch; past it the log moves to a new epoch "
            "(lower it only to test that boundary).",
        ),
    ] = ESN_MAX,
    clock_skew_max: Annotated[
        str,
        typer.Option(
            help="A node whose clock is further than this from the cluster's takes no "
            "sequencers and applies no retention by time until it is back, e.g. 5s.",
        ),
    ] = "5s",
    sequencer_hold_down: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds a node that comes back (restarted into a running cluster, "
            "paused, cut off) waits in health before it takes sequencers again.",
        ),
    ] = 30.0,
    gossip_interval: Annotated[
        float,
        typer.Option(
            min=0.01,
            help="Seconds between this node's gossips to other nodes (the failure detector).",
        ),
    ] = 0.25,
    dead_after: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds without word of a member before the nodes take it as dead and "
            "route around it (its session may last longer: 10 s on ZooKeeper).",
        ),
    ] = 3.0,
    compaction_interval: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds between the cleaner's looks for a compacted log to clean "
            "(0: only when asked, by `logstrand compact`).",
        ),
    ] = 15.0,
    group_metrics_interval: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds between updates of the consumer groups' position and lag "
            "metrics, on the node that sequences the positions log (0: none).",
        ),
    ] = 10.0,
    compaction_map: Annotated[
        str,
        typer.Option(help="Memory of the cleaner's offset map (24 bytes a key), e.g. 64MiB."),
    ] = "64MiB",
    compaction_io_rate: Annotated[
        str,
        typer.Option(help="Bytes a second a compaction pass reads and scans (0: no limit)."),
    ] = "0",
    tls_cert: Annotated[
        str | None, typer.Option(help="This node's certificate (PEM): TLS on every connection.")
    ] = None,
    tls_key: Annotated[str | None, typer.Option(help="The key of --tls-cert (PEM).")] = None,
    tls_ca: Annotated[
        str | None, typer.Option(help="The cluster's CA certificate (PEM), for --tls-cert.")
    ] = None,
    max_connections: Annotated[
        int, typer.Option(min=16, help="Connections open at once; more are closed at accept.")
    ] = 4096,
    max_connections_per_peer: Annotated[
        int, typer.Option(min=4, help="Connections open at once from one address.")
    ] = 2048,
    idle_timeout: Annotated[
        float,
        typer.Option(min=1.0, help="Seconds a connection with no read stream may stay silent."),
    ] = 600.0,
    send_queue: Annotated[
        str,
        typer.Option(help="Bytes queued to send on one connection before its peer is throttled."),
    ] = "64MiB",
    send_budget: Annotated[
        str,
        typer.Option(help="Bytes queued to send on all connections of the node together."),
    ] = "256MiB",
    receive_budget: Annotated[
        str | None,
        typer.Option(
            help="Bytes the node holds of what clients sent (frames coming in, requests "
            "not yet answered), all together; past it connections wait to be read. Other "
            "nodes get a budget of the same size. Default: 1/16 of RAM, 64MiB..2GiB.",
        ),
    ] = None,
    requests_per_connection: Annotated[
        int,
        typer.Option(
            min=1,
            help="Requests one connection may have unanswered; at that many it is not "
            "read until replies go out.",
        ),
    ] = 128,
    request_bytes_per_connection: Annotated[
        str,
        typer.Option(
            help="Bytes of unanswered requests one connection may have (one request "
            "larger than this is taken alone).",
        ),
    ] = "512KiB",
    frame_min_rate: Annotated[
        str,
        typer.Option(
            help="A frame must arrive within 10 s plus its size at this rate (bytes a "
            "second), or its connection is closed.",
        ),
    ] = "1MiB",
    user_connections: Annotated[
        int,
        typer.Option(min=1, help="In secure mode: connections one user may have open."),
    ] = 256,
    user_bytes: Annotated[
        str | None,
        typer.Option(
            help="In secure mode: bytes one user's connections may hold together "
            "(default: a quarter of --receive-budget).",
        ),
    ] = None,
    handshake_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds a new connection has for TLS and Hello.")
    ] = 3.0,
    read_streams_per_connection: Annotated[
        int, typer.Option(min=1, help="Read streams one connection may have open.")
    ] = 256,
    background_passes: Annotated[
        int, typer.Option(min=1, help="Compaction drop passes running at once on this node.")
    ] = 4,
    min_free: Annotated[
        str,
        typer.Option(
            help="Free space the data directory keeps, as a size (1GiB) or a share of its "
            "file system (5%): below it the node refuses STOREs (NOSPC) and serves reads "
            "only, until space comes back.",
        ),
    ] = "0",
    rebuild_rate: Annotated[
        str,
        typer.Option(
            help="Bytes a second of new copies this node sends as a rebuilding donor "
            "(0: no limit), e.g. 50MiB.",
        ),
    ] = "0",
    rebuild_settle: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds donors wait after a rebuilding starts, for every sequencer to "
            "stop placing copies on the nodes being rebuilt (the cluster view's refresh "
            "is 2 s).",
        ),
    ] = 5.0,
    producer_expiry: Annotated[
        str,
        typer.Option(
            help="An idempotent producer idle this long on a log is forgotten there "
            "(its next append fails with UNKNOWN_PRODUCER), e.g. 1d, 30m, 5s.",
        ),
    ] = "1d",
) -> None:
    """Run one storage node (serves until SIGINT or SIGTERM)."""
    from ..compaction._cleaner import Cleaner, CleanerOptions
    from ..groups._monitor import GroupsMonitor, MonitorOptions
    from ..logsdb import LogsDBOptions
    from ..storage import Node, NodeOptions

    partition_ms = duration_option(partition_duration, "--partition-duration")
    expiry_ms = duration_option(producer_expiry, "--producer-expiry")
    skew_max_ms = duration_option(clock_skew_max, "--clock-skew-max") or 0
    if skew_max_ms <= 0:
        fail("--clock-skew-max must be more than 0")
    map_bytes = size_option(compaction_map, "--compaction-map")
    io_rate = size_option(compaction_io_rate, "--compaction-io-rate")
    if map_bytes < 48:
        fail("--compaction-map must hold at least two keys (48 bytes)")
    if not partition_ms:
        fail("--partition-duration must be more than 0")

    free_bytes, free_fraction = parse_min_free(min_free)
    rebuild_rate_bytes = size_option(rebuild_rate, "--rebuild-rate")
    send_queue_bytes = size_option(send_queue, "--send-queue")
    send_budget_bytes = size_option(send_budget, "--send-budget")
    intake = _intake_options(
        receive_budget, request_bytes_per_connection, frame_min_rate, user_bytes
    )
    listen_at = host_port(listen, "--listen")
    advertise_at = host_port(advertise, "--advertise")
    metrics_at = host_port(metrics, "--metrics")
    level = LEVELS.get(log_level.lower())
    if level is None:
        fail(f"--log-level: {log_level!r} is not one of {', '.join(LEVELS)}")
    if log_format not in ("text", "json"):
        fail(f"--log-format: {log_format!r} is not text or json")
    given = [x for x in (tls_cert, tls_key, tls_ca) if x]
    if given and len(given) != 3:
        fail("TLS needs all three of --tls-cert, --tls-key and --tls-ca")
    if print_config:  # the files named are read when the node starts
        params = {p.name: ctx.params.get(p.name) for p in ctx.command.params if p.name}
        print(config_toml(params), end="")
        return
    tls = None
    if given:
        from ..security import TlsFiles, server_context

        assert tls_cert
        assert tls_key
        assert tls_ca
        tls = TlsFiles(tls_cert, tls_key, tls_ca)
        server_context(tls)  # unreadable or mismatched files: one line, exit 2

    url = require_url(url)
    setup_logging(node_id, level, log_format)

    async def main() -> None:
        options = NodeOptions(
            recovery_grace_s=recovery_grace,
            recovery_stall_s=recovery_stall,
            esn_max=esn_max,
            clock_skew_max_ms=skew_max_ms,
            sequencer_hold_down_s=sequencer_hold_down,
            gossip_s=gossip_interval,
            dead_after_s=dead_after,
            maintenance_s=maintenance_interval,
            tls=tls,
            connections_max=max_connections,
            connections_per_peer_max=max_connections_per_peer,
            idle_s=idle_timeout,
            send_queue_bytes=send_queue_bytes,
            send_budget_bytes=send_budget_bytes,
            requests_per_connection=requests_per_connection,
            connections_per_user_max=user_connections,
            **intake,
            handshake_s=handshake_timeout,
            read_streams_per_connection=read_streams_per_connection,
            background_passes_max=background_passes,
            min_free_bytes=free_bytes,
            min_free_fraction=free_fraction,
            rebuild_rate_bytes=rebuild_rate_bytes,
            rebuild_settle_s=rebuild_settle,
            producer_expiry_ms=expiry_ms or 1,
        )
        cleaner = Cleaner(
            CleanerOptions(interval_s=compaction_interval, map_bytes=map_bytes, io_bytes_s=io_rate)
        )
        node = Node(
            url,
            node_id,
            data_dir=data_dir,
            listen=listen_at,
            advertise=None if advertise_at is None else advertise,
            metrics=metrics_at,
            options=options,
            logsdb_options=LogsDBOptions(partition_duration_ms=partition_ms),
            extensions=(cleaner, GroupsMonitor(MonitorOptions(group_metrics_interval))),
        )
        # The receiver stays open until the node has shut down: a second
        # SIGTERM during shutdown (supervisors and impatient operators send
        # them) would otherwise kill the process before it persists its
        # release pointers, and the next recovery would plug acknowledged
        # records as holes.
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        logging.getLogger("logstrand.node").info("node %d stopping", node_id)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                try:
                    await node.run()
                finally:
                    nursery.cancel_scope.cancel()

    if profile is None:
        trio.run(main)
        return
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(trio.run, main)
    finally:
        prof.dump_stats(str(profile))


def _intake_options(
    budget: str | None, per_connection: str, min_rate: str, user: str | None
) -> dict[str, int]:
    """The node's bounds on what it takes in (``net._intake``), checked."""
    from ..storage._options import default_receive_budget

    out = {
        "receive_budget_bytes": (
            default_receive_budget() if budget is None else size_option(budget, "--receive-budget")
        ),
        "request_bytes_per_connection": size_option(
            per_connection, "--request-bytes-per-connection"
        ),
        "frame_min_rate": size_option(min_rate, "--frame-min-rate"),
    }
    out["bytes_per_user_max"] = (
        out["receive_budget_bytes"] // 4 if user is None else size_option(user, "--user-bytes")
    )
    for name, option in (
        ("receive_budget_bytes", "--receive-budget"),
        ("request_bytes_per_connection", "--request-bytes-per-connection"),
        ("frame_min_rate", "--frame-min-rate"),
        ("bytes_per_user_max", "--user-bytes"),
    ):
        if out[name] < 1024:
            fail(f"{option} must be at least 1KiB")
    return out

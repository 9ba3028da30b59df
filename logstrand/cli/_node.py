"""``logstrand node``: run one storage node, from options or a TOML file.

A configuration file holds the same options as the command line, keyed by
their names (``data_dir`` or ``data-dir``; ``id`` for ``--id``); what the
command line gives wins.  ``--print-config`` shows what the node would run
with.  docs/deploy.md has a whole file and a systemd unit (``deploy/``).

Most options are ``NodeOptions``'s declared fields (``cli._node_options``);
the ones here are about the process (addresses, logging, files) or belong to
another part (LogsDB, the cleaner, the groups monitor).
"""

from __future__ import annotations

import inspect
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio
import typer

from . import _leaving, _node_options
from ._common import (
    REQUIRED,
    URL,
    declared,
    duration_option,
    fail,
    keyword,
    parse_node_id,
    require_url,
    size_option,
)
from ._node_kafka import (
    KAFKA_OPTIONS,
    kafka_front,
    max_transaction_timeout_ms,
    transactional_id_expiry_ms,
)
from ._node_setup import (
    LEVELS,
    config_toml,
    host_port,
    load_config,
    parse_min_free,
    setup_logging,
)
from ._node_tier import TIER_OPTIONS, tier_extension

if TYPE_CHECKING:
    from ..security import TlsFiles
    from ..storage import Node


#: ``node``'s own options, before ``NodeOptions``'s declared ones.
_OWN_OPTIONS = (
    keyword(
        "node_id",
        int,
        REQUIRED,
        typer.Option("--id", help="This node's id in the configuration.", parser=parse_node_id),
    ),
    keyword(
        "config",
        Path | None,
        None,
        typer.Option(
            "--config",
            help="A TOML file of these options, keyed by their names (data_dir or "
            "data-dir; id for --id); options on the command line win over it.",
            is_eager=True,
            callback=load_config,
        ),
    ),
    keyword(
        "print_config",
        bool,
        False,
        typer.Option("--print-config", help="Print the effective configuration as TOML and exit."),
    ),
    URL,
    keyword(
        "listen",
        str | None,
        None,
        typer.Option(
            help="HOST:PORT to listen on, e.g. 0.0.0.0:4440 (default: the address in "
            "the cluster configuration).",
        ),
    ),
    keyword(
        "advertise",
        str | None,
        None,
        typer.Option(
            help="HOST:PORT clients and the other nodes reach this node at; written to "
            "the cluster configuration at start when it differs from it.",
        ),
    ),
    keyword(
        "metrics",
        str | None,
        None,
        typer.Option(
            help="HOST:PORT of the Prometheus endpoint /metrics (default: 127.0.0.1 and "
            "the configuration's metrics port; none when that is unset).",
        ),
    ),
    *KAFKA_OPTIONS,
    *TIER_OPTIONS,
    keyword(
        "http_port",
        int | None,
        None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve the console (a web page) and the HTTP admin API on this port "
            "(on the host the node listens on; docs/console.md).",
        ),
    ),
    keyword(
        "http_allowed_hosts",
        str | None,
        None,
        typer.Option(
            help="Host names the console answers under besides the node's own address, "
            "IP addresses and localhost, comma-separated (a name it is reached by through "
            "a proxy or DNS). Other names are refused: a web page cannot reach the console "
            "through a name of its own (DNS rebinding).",
        ),
    ),
    keyword(
        "group_session_ms",
        int,
        45_000,
        typer.Option(
            min=1_000,
            max=1_800_000,
            help="Session timeout of the members of groups this node coordinates, "
            "client.subscribe's and Kafka's of group.protocol=consumer (Kafka's "
            "group.consumer.session.timeout.ms): a member silent this long is dropped "
            "and its logs go to the others.",
        ),
    ),
    keyword("log_level", str, "info", typer.Option(help="debug, info, warning or error.")),
    keyword("log_format", str, "text", typer.Option(help="text, or json: one JSON object a line.")),
    keyword(
        "data_dir",
        str | None,
        None,
        typer.Option(help="LogsDB directory (default: from the configuration)."),
    ),
    keyword(
        "profile",
        Path | None,
        None,
        typer.Option(help="Write a cProfile of the node's run to this file."),
    ),
    keyword(
        "partition_duration",
        str,
        "15m",
        typer.Option(help="Start a new LogsDB partition when the newest is this old."),
    ),
    keyword(
        "compaction_interval",
        float,
        15.0,
        typer.Option(
            min=0.0,
            help="Seconds between the cleaner's looks for a compacted log to clean "
            "(0: only when asked, by `logstrand compact`).",
        ),
    ),
    keyword(
        "compaction_map",
        str,
        "64MiB",
        typer.Option(help="Memory of the cleaner's offset map (24 bytes a key), e.g. 64MiB."),
    ),
    keyword(
        "compaction_drop_entries",
        int,
        512 * 1024,
        typer.Option(
            min=1,
            max=1_000_000,
            help="Offset-map entries one DropCopies message carries; a larger map "
            "goes to the nodes in parts (24 bytes an entry).",
        ),
    ),
    keyword(
        "compaction_io_rate",
        str,
        "0",
        typer.Option(help="Bytes a second a compaction pass reads and scans (0: no limit)."),
    ),
    keyword(
        "group_metrics_interval",
        float,
        10.0,
        typer.Option(
            min=0.0,
            help="Seconds between updates of the consumer groups' position and lag "
            "metrics, on the node that sequences the positions log (0: none).",
        ),
    ),
    keyword(
        "min_free",
        str,
        "0",
        typer.Option(
            help="Free space the data directory keeps, as a size (1GiB) or a share of its "
            "file system (5%): below it the node refuses STOREs (NOSPC) and serves reads "
            "only, until space comes back.",
        ),
    ),
    keyword(
        "tls_cert",
        str | None,
        None,
        typer.Option(help="This node's certificate (PEM): TLS on every connection."),
    ),
    keyword("tls_key", str | None, None, typer.Option(help="The key of --tls-cert (PEM).")),
    keyword(
        "tls_ca",
        str | None,
        None,
        typer.Option(help="The cluster's CA certificate (PEM), for --tls-cert."),
    ),
)


def node(**params: Any) -> None:
    """Run one storage node (serves until SIGINT or SIGTERM)."""
    ctx: typer.Context = params["ctx"]
    node_id: int = params["node_id"]
    level = LEVELS.get(params["log_level"].lower())
    if level is None:
        fail(f"--log-level: {params['log_level']!r} is not one of {', '.join(LEVELS)}")
    if params["log_format"] not in ("text", "json"):
        fail(f"--log-format: {params['log_format']!r} is not text or json")
    built = _build(params)
    if params["print_config"]:  # the files named are read when the node starts
        shown = {p.name: ctx.params.get(p.name) for p in ctx.command.params if p.name}
        print(config_toml(shown), end="")
        return
    url = require_url(params["url"])
    tls = _tls(params["tls_cert"], params["tls_key"], params["tls_ca"])
    setup_logging(node_id, level, params["log_format"])

    async def main() -> None:
        # The receiver stays open until the node has shut down: a second
        # SIGTERM during shutdown (supervisors and impatient operators send
        # them) would otherwise kill the process before it persists its
        # release pointers, and the next recovery would plug acknowledged
        # records as holes.
        # Its sequencers first end their epochs (``Node.hand_off``), so
        # that the logs' next sequencers recover nothing.
        node = built(url, tls)
        # (Once the receiver below closes, SIGTERM is ``_leaving``'s again.)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        _leaving.leaving()  # a second SIGTERM changes nothing now
                        logging.getLogger("logstrand.node").info("node %d stopping", node_id)
                        await node.hand_off()
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                try:
                    await node.run()
                finally:
                    nursery.cancel_scope.cancel()

    profile: Path | None = params["profile"]
    if profile is None:
        trio.run(main)
        return
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(trio.run, main)
    finally:
        prof.dump_stats(str(profile))


def _build(params: dict[str, Any]) -> Callable[[str, TlsFiles | None], Node]:
    """Check every option now (one line and exit 2 on the first wrong one)
    and return what makes the node, inside the node's trio run."""
    from ..client._lazy import LazyClient
    from ..compaction._cleaner import Cleaner, CleanerOptions
    from ..groups import GroupsMonitor, MonitorOptions, NodeGroups
    from ..logsdb import LogsDBOptions
    from ..storage import Node, NodeOptions

    partition_ms = duration_option(params["partition_duration"], "--partition-duration")
    if not partition_ms:
        fail("--partition-duration must be more than 0")
    map_bytes = size_option(params["compaction_map"], "--compaction-map")
    if map_bytes < 48:
        fail("--compaction-map must hold at least two keys (48 bytes)")
    io_rate = size_option(params["compaction_io_rate"], "--compaction-io-rate")
    free_bytes, free_fraction = parse_min_free(params["min_free"])
    addresses = {
        name: host_port(params[name], f"--{name}") for name in ("listen", "advertise", "metrics")
    }

    groups = NodeGroups(
        params["group_session_ms"],
        max_transaction_timeout_ms(params),
        transactional_id_expiry_ms(params),
    )
    kafka = kafka_front(params, groups)
    tier = tier_extension(params)
    if len([x for x in (params[f"tls_{n}"] for n in ("cert", "key", "ca")) if x]) not in (0, 3):
        fail("TLS needs all three of --tls-cert, --tls-key and --tls-ca")
    options = NodeOptions(
        **_node_options.values(params), min_free_bytes=free_bytes, min_free_fraction=free_fraction
    )
    cleaner = CleanerOptions(
        interval_s=params["compaction_interval"],
        map_bytes=map_bytes,
        io_bytes_s=io_rate,
        drop_entries_max=params["compaction_drop_entries"],
    )
    monitor = MonitorOptions(params["group_metrics_interval"])

    def make(url: str, tls: TlsFiles | None) -> Node:
        return Node(
            url,
            params["node_id"],
            data_dir=params["data_dir"],
            listen=addresses["listen"],
            advertise=None if addresses["advertise"] is None else params["advertise"],
            metrics=addresses["metrics"],
            options=attrs.evolve(options, tls=tls),
            logsdb_options=LogsDBOptions(partition_duration_ms=partition_ms),
            # The coordinator before the Kafka front, which shares it.
            extensions=(Cleaner(cleaner), GroupsMonitor(monitor, LazyClient), groups)
            + (() if kafka is None else (kafka,))
            + (() if tier is None else (tier,))
            + _console(params["http_port"], params["http_allowed_hosts"]),
            kafka=None if kafka is None else kafka.address(),
        )

    return make


def _console(port: int | None, allowed_hosts: str | None) -> tuple[Any, ...]:
    """The node's console (none without --http-port)."""
    if port is None:
        if allowed_hosts is not None:
            fail("--http-allowed-hosts needs --http-port")
        return ()
    from ..console import NodeConsole, NodeConsoleOptions

    names = tuple(n.strip() for n in (allowed_hosts or "").split(",") if n.strip())
    return (NodeConsole(NodeConsoleOptions(port, names)),)


def _tls(cert: str | None, key: str | None, ca: str | None) -> TlsFiles | None:
    if not (cert and key and ca):
        return None  # all three or none: checked by _build
    from ..security import TlsFiles, server_context

    tls = TlsFiles(cert, key, ca)
    server_context(tls)  # unreadable or mismatched files: one line, exit 2
    return tls


node = declared(
    inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
    *_OWN_OPTIONS,
    *_node_options.parameters(),
)(node)

"""``logstrand node``, ``logstrand dev up``, ``logstrand append``."""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import trio
import typer

from ..errors import InvalidArgumentError
from ..records import ESN_MAX
from ..types import Record, format_lsn
from ._common import (
    JsonOption,
    UrlOption,
    connect_client,
    console,
    duration_option,
    fail,
    print_json,
    require_url,
    size_option,
)

dev_app = typer.Typer(help="Run a local cluster for development.", no_args_is_help=True)


def node(
    node_id: Annotated[int, typer.Option("--id", help="This node's id in the configuration.")],
    url: UrlOption = None,
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
    clock_offset: Annotated[
        int,
        typer.Option(
            help="Milliseconds added to this node's clock where its sequencers stamp "
            "records (to test skewed clocks).",
        ),
    ] = 0,
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
    map_bytes = size_option(compaction_map, "--compaction-map")
    io_rate = size_option(compaction_io_rate, "--compaction-io-rate")
    if map_bytes < 48:
        fail("--compaction-map must hold at least two keys (48 bytes)")
    if not partition_ms:
        fail("--partition-duration must be more than 0")

    free_bytes, free_fraction = _min_free(min_free)
    rebuild_rate_bytes = size_option(rebuild_rate, "--rebuild-rate")
    send_queue_bytes = size_option(send_queue, "--send-queue")
    send_budget_bytes = size_option(send_budget, "--send-budget")
    tls = None
    given = [x for x in (tls_cert, tls_key, tls_ca) if x]
    if given and len(given) != 3:
        fail("TLS needs all three of --tls-cert, --tls-key and --tls-ca")
    if given:
        from ..security import TlsFiles, server_context

        assert tls_cert
        assert tls_key
        assert tls_ca
        tls = TlsFiles(tls_cert, tls_key, tls_ca)
        server_context(tls)  # unreadable or mismatched files: one line, exit 2

    url = require_url(url)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s node{node_id} %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    async def main() -> None:
        options = NodeOptions(
            recovery_grace_s=recovery_grace,
            recovery_stall_s=recovery_stall,
            esn_max=esn_max,
            clock_offset_ms=clock_offset,
            maintenance_s=maintenance_interval,
            tls=tls,
            connections_max=max_connections,
            connections_per_peer_max=max_connections_per_peer,
            idle_s=idle_timeout,
            send_queue_bytes=send_queue_bytes,
            send_budget_bytes=send_budget_bytes,
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


def _min_free(text: str) -> tuple[int, float]:
    """``--min-free``: (bytes, 0.0) for a size, (0, fraction) for a percentage."""
    t = text.strip()
    if t.endswith("%"):
        try:
            pct = float(t[:-1])
        except ValueError:
            fail(f"--min-free: {text!r} is not a size (1GiB) or a percentage (5%)")
        if not 0 <= pct < 100:
            fail(f"--min-free: {text!r} must be at least 0% and below 100%")
        return 0, pct / 100
    return size_option(t, "--min-free"), 0.0


@dev_app.command("up")
def dev_up(
    directory: Annotated[Path, typer.Option("--dir", help="Where the cluster keeps its data.")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=64, help="How many nodes.")] = 3,
    zookeeper: Annotated[
        str | None,
        typer.Option("--zookeeper", help="Use ZooKeeper at HOST:PORT instead of SQLite."),
    ] = None,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="TLS with a CA and node certificates in DIR/tls, and an 'admin' user "
            "whose token is written to DIR/admin.token.",
        ),
    ] = False,
    rebuild_grace: Annotated[
        str | None,
        typer.Option(
            help="Rebuild a node without an operator once it is dead this long (e.g. 30s); "
            "as 'logstrand cluster set rebuild-grace'.",
        ),
    ] = None,
) -> None:
    """Start a local cluster, print 'ready <url>', stop it on SIGINT/SIGTERM."""
    from ..testing import LocalCluster

    grace_ms = None if rebuild_grace is None else duration_option(rebuild_grace, "--rebuild-grace")
    cluster = LocalCluster(
        directory, nodes=nodes, zookeeper=zookeeper, secure=secure, rebuild_grace_ms=grace_ms
    )
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
        if secure:
            tls = directory.absolute() / "tls"
            console.print(
                f"TLS on; clients: LOGSTRAND_CA={tls / 'ca.pem'} "
                f"LOGSTRAND_TOKEN_FILE={directory.absolute() / 'admin.token'}",
                highlight=False,
            )
        print(f"ready {cluster.url}", flush=True)
        while not stop:
            for node_id in list(cluster.procs):
                if not cluster.alive(node_id):
                    console.print(f"node {node_id} exited; see {directory}/logs/node{node_id}.log")
                    cluster.procs.pop(node_id)
            time.sleep(0.2)
    finally:
        cluster.stop()
        print("stopped", flush=True)


def append(
    log: Annotated[int, typer.Argument(help="Log id.", min=1)],
    payload: Annotated[
        str | None, typer.Argument(help="The record; '-' (or nothing) reads lines from stdin.")
    ] = None,
    key: Annotated[str | None, typer.Option(help="Record key (compacted logs).")] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Append a record (or one record per line of stdin) and print the LSNs."""

    url = require_url(url)
    if payload is None or payload == "-":
        payloads = [line.rstrip(b"\n") for line in sys.stdin.buffer]
    else:
        payloads = [payload.encode()]
    if not payloads:
        raise InvalidArgumentError("nothing to append")
    keys = [key.encode() if key is not None else None] * len(payloads)
    with connect_client(url) as client:
        lsns = client.append_batch(log, payloads, keys=keys)
    if as_json:
        print_json({"log_id": log, "lsns": lsns})
    elif len(lsns) == 1:
        console.print(f"appended to log {log} at LSN {lsns[0]} ({format_lsn(lsns[0])})")
    else:
        console.print(
            f"appended {len(lsns)} records to log {log}: "
            f"LSNs {lsns[0]} ({format_lsn(lsns[0])}) .. {lsns[-1]} ({format_lsn(lsns[-1])})"
        )


@dev_app.command("demo")
def dev_demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the cluster keeps its data.")
    ] = Path("run-data/demo"),
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=16)] = 3,
) -> None:
    """Start a local cluster, create a log, append to it three ways, and stop."""
    import urllib.request

    from ..epochstore import LogAttributes, open_epoch_store
    from ..errors import ExistsError
    from ..testing import LocalCluster

    replication = min(2, nodes)
    with LocalCluster(directory, nodes=nodes) as cluster:
        console.print(f"started {nodes} nodes: ready {cluster.url}")
        console.print(
            "insecure mode (no TLS, every peer trusted) on 127.0.0.1 only; "
            "`logstrand dev up --secure` runs one with TLS and tokens (docs/security.md)"
        )
        with open_epoch_store(cluster.url) as store:
            try:
                store.create_logs(1, 10, LogAttributes(replication_factor=replication))
                console.print(f"created logs 1..10 with replication {replication}")
            except ExistsError:
                console.print("logs 1..10 exist already")
        with connect_client(cluster.url) as client:
            lsn = client.append(1, b"hello, logstrand")
            console.print(f"append(1, b'hello, logstrand') -> LSN {lsn} ({format_lsn(lsn)})")
            lsns = client.append_batch(1, [b"record %d" % i for i in range(1000)])
            console.print(
                f"append_batch(1, 1000 records) -> LSNs {format_lsn(lsns[0])} .. "
                f"{format_lsn(lsns[-1])}"
            )
            t0 = time.perf_counter()
            futures = [client.append_async(2, b"async %d" % i) for i in range(5000)]
            got = [f.result(timeout=60) for f in futures]
            took = time.perf_counter() - t0
            console.print(
                f"append_async(2, ...) x 5000 -> {len(set(got))} distinct LSNs in {took:.2f} s "
                f"({5000 / took:,.0f} appends/s, coalesced into few APPENDs)"
            )
            t0 = time.perf_counter()
            payloads = [b"x" * 100] * 1000
            for _ in range(100):
                client.append_batch(3, payloads)
            took = time.perf_counter() - t0
            console.print(
                f"append_batch(3, 1000 x 100 B) x 100 -> {100_000 / took:,.0f} records/s "
                f"with {replication} copies each"
            )
            first = next(iter(client.read(1)))
            console.print(f"read(1) first item -> {first}")
            t0 = time.perf_counter()
            items = list(client.read(3))
            took = time.perf_counter() - t0
            console.print(
                f"read(3) from the start to the tail -> {len(items):,} records in {took:.2f} s "
                f"({len(items) / took:,.0f} records/s), no gaps: "
                f"{all(isinstance(x, Record) for x in items)}"
            )
            mid = items[len(items) // 2]
            if isinstance(mid, Record):
                found = format_lsn(client.find_time(3, mid.timestamp))
                tail = format_lsn(client.tail_lsn(3))
                console.print(f"find_time(3, {mid.timestamp}) -> {found}; tail_lsn(3) -> {tail}")
        for node_id, cfg in sorted(cluster.nodes.items()):
            url = f"http://127.0.0.1:{cfg.metrics_port}/metrics"
            with urllib.request.urlopen(url) as resp:
                text = resp.read().decode()
            stored = sum(
                float(line.split()[1])
                for line in text.splitlines()
                if line.startswith("logstrand_store_records_total")
            )
            console.print(f"node {node_id} ({cfg.address}) stored {stored:,.0f} record copies")
    console.print(f"cluster stopped; its data stays in {directory}")

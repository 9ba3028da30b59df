"""``logstrand dev up``, ``logstrand dev demo``."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..types import Record, format_lsn
from ._common import (
    connect_client,
    console,
    duration_option,
    fail,
)

if TYPE_CHECKING:
    from ..client import Client
    from ..testing import LocalCluster

dev_app = typer.Typer(help="Run a local cluster for development.", no_args_is_help=True)


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
    kafka: Annotated[
        bool,
        typer.Option(
            "--kafka",
            help="Every node serves the Kafka protocol too, creating topics when asked for "
            "them; prints 'kafka bootstrap HOST:PORT,...' (docs/kafka.md).",
        ),
    ] = False,
) -> None:
    """Start a local cluster, print 'ready <url>' and 'console http://HOST:PORT/'
    (every node serves the console: docs/console.md), stop it on SIGINT/SIGTERM."""
    from ..testing import LocalCluster

    grace_ms = None if rebuild_grace is None else duration_option(rebuild_grace, "--rebuild-grace")
    cluster = LocalCluster(
        directory,
        nodes=nodes,
        zookeeper=zookeeper,
        secure=secure,
        rebuild_grace_ms=grace_ms,
        kafka=kafka,
        console=True,
    )
    _serve_until_signalled(cluster, directory)


def _serve_until_signalled(cluster: LocalCluster, directory: Path) -> None:
    """Start ``cluster``, say how to reach it, and keep it until SIGINT/SIGTERM."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
        if cluster.secure:
            tls = directory.absolute() / "tls"
            console.print(
                f"TLS on; clients: LOGSTRAND_CA={tls / 'ca.pem'} "
                f"LOGSTRAND_TOKEN_FILE={directory.absolute() / 'admin.token'}",
                highlight=False,
            )
        if cluster.kafka:
            print(f"kafka bootstrap {cluster.kafka_bootstrap}", flush=True)
            if cluster.secure:
                console.print(
                    "kafka: security.protocol=SASL_SSL sasl.mechanism=SCRAM-SHA-256 "
                    f"sasl.username=admin sasl.password=<{directory.absolute() / 'admin.token'}> "
                    f"ssl.ca.location={directory.absolute() / 'tls' / 'ca.pem'}",
                    highlight=False,
                )
        if cluster.console:
            print(f"console {next(iter(cluster.console_urls.values()))}/", flush=True)
        env = write_env(cluster, directory)
        print(f"environment: . {env}  (LOGSTRAND_URL and credentials for this cluster)", flush=True)
        print(f"ready {cluster.url}", flush=True)
        while not stop:
            for node_id in list(cluster.procs):
                if not cluster.alive(node_id):
                    console.print(f"node {node_id} exited; see {directory}/logs/node{node_id}.log")
                    cluster.stop_node(node_id)
            time.sleep(0.2)
    finally:
        cluster.stop()
        print("stopped", flush=True)


#: What a shell aimed at one cluster must not keep from another: the
#: credentials of a secure cluster are unset by an insecure one's file.
_CREDENTIALS = (
    "LOGSTRAND_CA",
    "LOGSTRAND_TOKEN",
    "LOGSTRAND_TOKEN_FILE",
    "LOGSTRAND_CERT",
    "LOGSTRAND_KEY",
)


def write_env(cluster: LocalCluster, directory: Path) -> Path:
    """``DIR/env``: the shell lines that aim ``logstrand``, the client
    (``connect()`` without arguments) and Kafka tools at this cluster, and at
    it only: sourcing it replaces whatever an earlier cluster's exports left
    (a secure cluster's CA left set made `users add` land in the wrong one)."""
    import shlex

    root = directory.absolute()
    values = {"LOGSTRAND_URL": cluster.url}
    if cluster.secure:
        values["LOGSTRAND_CA"] = str(root / "tls" / "ca.pem")
        values["LOGSTRAND_TOKEN_FILE"] = str(root / "admin.token")
    if cluster.kafka:
        values["KAFKA_BOOTSTRAP"] = cluster.kafka_bootstrap
    if cluster.console:
        values["LOGSTRAND_CONSOLE"] = next(iter(cluster.console_urls.values())) + "/"
    lines = [f"# logstrand dev up --dir {shlex.quote(str(directory))}: `. {root / 'env'}`"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in values.items()]
    unset = [k for k in (*_CREDENTIALS, "KAFKA_BOOTSTRAP") if k not in values]
    lines.append(f"unset {' '.join(unset)}")
    path = root / "env"
    path.write_text("\n".join(lines) + "\n")
    return path


@dev_app.command("demo")
def dev_demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the cluster keeps its data.")
    ] = Path("run-data/demo"),
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=16)] = 3,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Keep the cluster running afterwards, with its console, until Ctrl-C "
            "(when run from a terminal; otherwise say where the console was and stop).",
        ),
    ] = False,
) -> None:
    """Start a local cluster, create a log, append to it three ways, and stop
    (with --keep: keep it, and say where its console is)."""
    from ..epochstore import LogAttributes, open_epoch_store
    from ..testing import LocalCluster

    replication = min(2, nodes)
    _start_clean(directory)
    with LocalCluster(directory, nodes=nodes, console=keep) as cluster:
        console.print(f"started {nodes} nodes: ready {cluster.url}")
        console.print(
            "insecure mode (no TLS, every peer trusted) on 127.0.0.1 only; "
            "`logstrand dev up --secure` runs one with TLS and tokens (docs/security.md)"
        )
        with open_epoch_store(cluster.url) as store:  # a new cluster: _start_clean
            store.create_logs(1, 10, LogAttributes(replication_factor=replication))
        console.print(f"created logs 1..10 with replication {replication}")
        with connect_client(cluster.url) as client:
            _demo_appends(client, replication)
            _demo_reads(client)
        _demo_stored(cluster)
        if keep:
            _keep(cluster)
    console.print(f"cluster stopped; its data stays in {directory}")


#: The file that says a directory holds a demo's data (and may be emptied).
DEMO_MARK = ".logstrand-demo"


def _start_clean(directory: Path) -> None:
    """The demo shows a new cluster each time: the data of an earlier run
    goes (a second run read its logs again, epoch bridges and all, and
    looked like data loss).  Only a directory that a demo made, or an empty
    one, is used: never wipe a directory that holds something else."""
    import shutil

    if directory.exists() and any(directory.iterdir()):
        if not (directory / DEMO_MARK).exists():
            fail(
                f"{directory} holds something other than a demo's data: give --dir a new "
                "directory (the demo starts from an empty one)",
                1,
            )
        shutil.rmtree(directory)
        console.print(f"removed the previous demo's data in {directory}: the demo starts clean")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DEMO_MARK).write_text("made by `logstrand dev demo`, which empties it on start\n")


def _keep(cluster: LocalCluster) -> None:
    """Serve on until SIGINT/SIGTERM, saying where the console is (from a
    terminal only: a script that runs the demo is not left waiting)."""
    url = next(iter(cluster.console_urls.values()))
    if not sys.stdin.isatty():
        console.print(
            f"console {url}/ (not a terminal: stopping; `logstrand dev up` keeps a cluster "
            "with its console)",
            highlight=False,
        )
        return
    console.print(
        f"console {url}/ : open it in a browser (every node serves one); Ctrl-C stops the cluster",
        highlight=False,
    )
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass


def _demo_appends(client: Client, replication: int) -> None:
    """The demo's appends: one, a batch, many async, and a throughput run."""
    lsn = client.append(1, b"hello, logstrand")
    console.print(f"append(1, b'hello, logstrand') -> LSN {lsn} ({format_lsn(lsn)})")
    lsns = client.append_batch(1, [b"record %d" % i for i in range(1000)])
    console.print(
        f"append_batch(1, 1000 records) -> LSNs {format_lsn(lsns[0])} .. {format_lsn(lsns[-1])}"
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


def _demo_reads(client: Client) -> None:
    """The demo's reads: the first record, a whole log, find_time."""
    first = next(iter(client.read(1)))
    console.print(f"read(1) first item -> {first}")
    t0 = time.perf_counter()
    items = list(client.read(3))
    took = time.perf_counter() - t0
    # Records and gaps counted apart: a gap (an epoch's end after a restart,
    # say) is not a record, and does not make the log any less whole.
    records = [x for x in items if isinstance(x, Record)]
    gaps = len(items) - len(records)
    console.print(
        f"read(3) from the start to the tail -> {len(records):,} records in {took:.2f} s "
        f"({len(records) / took:,.0f} records/s), gaps: {gaps}"
    )
    if records:
        mid = records[len(records) // 2]
        found = format_lsn(client.find_time(3, mid.timestamp))
        tail = format_lsn(client.tail_lsn(3))
        console.print(f"find_time(3, {mid.timestamp}) -> {found}; tail_lsn(3) -> {tail}")


def _demo_stored(cluster: LocalCluster) -> None:
    """What each node says it stored (its /metrics)."""
    import urllib.request

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

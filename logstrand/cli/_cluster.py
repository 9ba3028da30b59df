"""``logstrand dev up``, ``logstrand dev demo``, ``logstrand append``."""

from __future__ import annotations

import json
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

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
)

if TYPE_CHECKING:
    from ..client import Client

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


#: Lines taken into one append_batch at most, and how long a batch waits
#: for the next line (a file goes in whole batches, a slow pipe line by line).
STDIN_BATCH = 10_000
STDIN_LINGER_S = 0.005


def append(
    log: Annotated[int, typer.Argument(help="Log id.", min=1)],
    payload: Annotated[
        str | None,
        typer.Argument(
            help="The record; '-' (or nothing) appends each line of stdin as it arrives."
        ),
    ] = None,
    key: Annotated[str | None, typer.Option(help="Record key (compacted logs).")] = None,
    key_separator: Annotated[
        str | None,
        typer.Option(help="Each stdin line is KEY<SEP>PAYLOAD, split at the first SEP."),
    ] = None,
    key_field: Annotated[
        str | None,
        typer.Option(help="Each stdin line is a JSON object; its field NAME is the key."),
    ] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Append a record, or each line of stdin as it arrives (`tail -f x | logstrand
    append 1` writes every line), and print the LSNs."""
    url = require_url(url)
    if sum(x is not None for x in (key, key_separator, key_field)) > 1:
        fail("give at most one of --key, --key-separator and --key-field")
    if key_separator == "":
        fail("--key-separator must not be empty")
    with connect_client(url) as client:
        if payload is not None and payload != "-":
            if key_separator is not None or key_field is not None:
                fail("--key-separator and --key-field split stdin lines, not an argument")
            lsns = [client.append(log, payload.encode(), key=_key_bytes(key))]
        else:
            lsns = _append_lines(client, log, _key_bytes(key), key_separator, key_field)
    if as_json:
        print_json({"log_id": log, "lsns": lsns})
    elif not lsns:
        console.print("nothing to append")
    elif len(lsns) == 1:
        console.print(f"appended to log {log} at LSN {lsns[0]} ({format_lsn(lsns[0])})")
    else:
        console.print(
            f"appended {len(lsns)} records to log {log}: "
            f"LSNs {lsns[0]} ({format_lsn(lsns[0])}) .. {lsns[-1]} ({format_lsn(lsns[-1])})"
        )


def _key_bytes(key: str | None) -> bytes | None:
    return None if key is None else key.encode()


def _append_lines(
    client: Client, log: int, key: bytes | None, separator: str | None, field: str | None
) -> list[int]:
    """Each stdin line as one record, in line order.  A thread reads the
    lines; each append takes the lines that came within ``STDIN_LINGER_S`` of
    each other (up to ``STDIN_BATCH``), so a slow pipe (``tail -f``) has each
    line appended as it comes and a file goes in large batches.  A line that
    cannot be split ends the run (exit 2) after the lines before it are
    appended."""
    lines: queue.Queue[bytes | None] = queue.Queue(maxsize=4 * STDIN_BATCH)

    def read() -> None:
        for raw in sys.stdin.buffer:
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=read, daemon=True, name="stdin").start()
    sep = separator.encode() if separator is not None else None
    lsns: list[int] = []
    number = 0
    bad: str | None = None
    done = False
    while not done and bad is None:
        taken = [lines.get()]
        while len(taken) < STDIN_BATCH and taken[-1] is not None:
            try:  # the lines that follow within a few ms go in the same batch
                taken.append(lines.get(timeout=STDIN_LINGER_S))
            except queue.Empty:
                break
        payloads: list[bytes] = []
        keys: list[bytes | None] = []
        for raw in taken:
            if raw is None:
                done = True
                break
            number += 1
            line = raw.rstrip(b"\n").rstrip(b"\r")
            record_key = key
            if sep is not None:
                record_key, found, line = line.partition(sep)
                if not found:
                    bad = f"line {number} has no {separator!r} to split the key at"
                    break
            elif field is not None:
                record_key = _json_key(line, field)
                if record_key is None:
                    bad = f"line {number} is not a JSON object with a field {field!r}"
                    break
            payloads.append(line)
            keys.append(record_key)
        if payloads:
            lsns += client.append_batch(log, payloads, keys=keys)
    if bad is not None:
        if lsns:
            console.print(f"appended {len(lsns)} records to log {log} before it")
        fail(bad)
    return lsns


def _json_key(line: bytes, field: str) -> bytes | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or field not in doc:
        return None
    value = doc[field]
    return (value if isinstance(value, str) else json.dumps(value, sort_keys=True)).encode()


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

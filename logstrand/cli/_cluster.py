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
from ..types import format_lsn
from ._common import JsonOption, UrlOption, console, fail, print_json

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
) -> None:
    """Run one storage node (serves until SIGINT or SIGTERM)."""
    from ..storage import Node

    if not url:
        fail("no cluster URL: pass --url or set LOGSTRAND_URL")
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s node{node_id} %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(Node(url, node_id, data_dir=data_dir).run)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    logging.getLogger("logstrand.node").info("node %d stopping", node_id)
                    nursery.cancel_scope.cancel()
                    break

    if profile is None:
        trio.run(main)
        return
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(trio.run, main)
    finally:
        prof.dump_stats(str(profile))


@dev_app.command("up")
def dev_up(
    directory: Annotated[Path, typer.Option("--dir", help="Where the cluster keeps its data.")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=64, help="How many nodes.")] = 3,
    zookeeper: Annotated[
        str | None,
        typer.Option("--zookeeper", help="Use ZooKeeper at HOST:PORT instead of SQLite."),
    ] = None,
) -> None:
    """Start a local cluster, print 'ready <url>', stop it on SIGINT/SIGTERM."""
    from ..testing import LocalCluster

    cluster = LocalCluster(directory, nodes=nodes, zookeeper=zookeeper)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
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
    from ..client import connect

    if not url:
        fail("no cluster URL: pass --url or set LOGSTRAND_URL")
    if payload is None or payload == "-":
        payloads = [line.rstrip(b"\n") for line in sys.stdin.buffer]
    else:
        payloads = [payload.encode()]
    if not payloads:
        raise InvalidArgumentError("nothing to append")
    keys = [key.encode() if key is not None else None] * len(payloads)
    with connect(url) as client:
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

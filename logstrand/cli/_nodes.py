"""The nodes: ``logstrand nodes add|remove|list``, ``logstrand status``, and
rebuilding: ``rebuild``, ``drain``, ``undrain`` and ``cluster set
rebuild-grace`` (docs/rebuilding.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._units import format_bytes, format_duration_ms, parse_duration_ms
from ..admin import rebuilding_doc, status_row
from ..epochstore import NodeConfig, describe_offset
from ..rebuilding import Mode, StorageState
from ..rebuilding._core import removable
from ..records import log_name
from ._common import (
    EXIT_FAILED,
    JsonOption,
    UrlOption,
    connect_client,
    console,
    err_console,
    fail,
    open_store,
    parse_node_id,
    print_json,
    require_url,
)

if TYPE_CHECKING:
    from ..epochstore import EpochStore, NodeConfig
    from ..rebuilding import RebuildingState

nodes_app = typer.Typer(help="The nodes of the cluster configuration.", no_args_is_help=True)
cluster_app = typer.Typer(help="Cluster-wide settings.", no_args_is_help=True)
cluster_set_app = typer.Typer(help="Change a cluster-wide setting.", no_args_is_help=True)
cluster_app.add_typer(cluster_set_app, name="set")

WaitOption = Annotated[
    bool, typer.Option("--wait", help="Show the progress and return when it has ended.")
]
NodeArgument = Annotated[int, typer.Argument(help="Node id.", min=0)]


def rebuild(
    node_id: NodeArgument,
    wait: WaitOption = False,
    mark_unrecoverable: Annotated[
        bool,
        typer.Option(
            "--mark-unrecoverable",
            help="The node's lost copies will not come back: readers report them "
            "as DATALOSS instead of waiting (after a rebuilding that could not "
            "find every record).",
        ),
    ] = False,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-create the copies NODE held on the other nodes, while NODE is down or
    its disk is lost.  Readers do not count NODE meanwhile (no false DATALOSS);
    when every donor is done NODE is AUTHORITATIVE_EMPTY.

    Exits with 1 when the rebuilding ended UNDERREPLICATION (too many nodes
    lost at once to find every record).
    """
    with open_store(url) as store:
        if mark_unrecoverable:
            st = store.mark_unrecoverable(node_id)
            state = st.storage_state(node_id, False).value
            if as_json:
                print_json({"node_id": node_id, "storage_state": state})
            else:
                console.print(f"node {node_id} marked unrecoverable: {state}")
            return
        alive = store.alive_nodes()
        st = store.request_rebuild(node_id, Mode.REBUILD)
        _started(st, node_id, "rebuilding", node_id in alive, as_json)
        if wait:
            _wait(store, node_id, as_json)


def drain(node_id: NodeArgument, wait: WaitOption = False, url: UrlOption = None) -> None:
    """Move every copy NODE holds to other nodes while NODE stays up and keeps
    serving reads (maintenance); then ``logstrand nodes remove NODE`` succeeds."""
    with open_store(url) as store:
        st = store.request_rebuild(node_id, Mode.DRAIN)
        _started(st, node_id, "draining", True, False)
        if wait:
            _wait(store, node_id, False)


def undrain(node_id: NodeArgument, url: UrlOption = None) -> None:
    """Return a drained (or draining) node to service."""
    with open_store(url) as store:
        store.undrain(node_id)
    console.print(f"node {node_id} is back in service")


@cluster_set_app.command("rebuild-grace")
def set_rebuild_grace(
    period: Annotated[str, typer.Argument(help="A duration (20m, 1h), or 'off'.")],
    url: UrlOption = None,
) -> None:
    """Rebuild a node without an operator once it has been dead this long."""
    grace = None if period.lower() in ("off", "none") else parse_duration_ms(period)
    with open_store(url) as store:
        store.set_rebuild_grace(grace)
    shown = "off" if grace is None else format_duration_ms(grace)
    console.print(f"self-initiated rebuilding after a node is dead for: {shown}")


def _started(st: RebuildingState, node_id: int, what: str, alive: bool, as_json: bool) -> None:
    shard = st.shards[node_id]
    if as_json:
        return
    if shard.state is not StorageState.REBUILDING:
        console.print(f"node {node_id} is {shard.state.value} already")
        return
    run = st.run
    donors = " ".join(str(d) for d in run.donors) if run else "-"
    console.print(
        f"{what} node {node_id} (run {run.id if run else '-'}; donors {donors})", highlight=False
    )
    if alive and shard.mode is Mode.REBUILD:
        console.print(
            f"[yellow]note:[/] node {node_id} is alive; its copies count for nothing until "
            f"the rebuilding ends (to keep it serving, 'logstrand drain {node_id}')"
        )


def _wait(store: EpochStore, node_id: int, as_json: bool) -> None:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} donors"),
        TextColumn("{task.fields[done]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=as_json, transient=False) as bar:
        task = bar.add_task(f"node {node_id}", total=None, done="")
        while True:
            st = store.rebuilding_state()
            shard = st.shards.get(node_id)
            if shard is None or not shard.in_progress:
                break
            if st.run is not None:
                progress = store.run_progress()
                records = sum(p.records for p in progress.values())
                size = sum(p.bytes for p in progress.values())
                bar.update(
                    task,
                    total=len(st.run.donors),
                    completed=sum(p.done for p in progress.values()),
                    done=f"{records:,} records, {format_bytes(size)}",
                )
            time.sleep(0.5)
    st = store.rebuilding_state()
    shard = st.shards.get(node_id)
    state = shard.state.value if shard else st.storage_state(node_id, True).value
    if as_json:
        print_json({"node_id": node_id, "storage_state": state, "last": st.last})
    else:
        last = st.last or {}
        console.print(
            f"node {node_id}: {state}; last run re-created {last.get('records', 0):,} record "
            f"copies ({format_bytes(last.get('bytes', 0))}) in "
            f"{format_duration_ms(last.get('duration_ms', 0))}",
            highlight=False,
        )
    if shard is None and node_id not in (st.last or {}).get("nodes", ()):
        fail(f"node {node_id}'s rebuilding was aborted (it came back, or was undrained)", 1)
    if shard is None:
        return  # rebuilt, and back in service already (it was running, wiped)
    if shard.state is StorageState.UNDERREPLICATION:
        console.print(
            f"[red]not every record was found[/]: readers wait for node {node_id}; if its "
            f"data is gone for good, 'logstrand rebuild {node_id} --mark-unrecoverable'"
        )
        raise typer.Exit(EXIT_FAILED)


@nodes_app.command("add")
def nodes_add(
    node_id: Annotated[
        int, typer.Option("--id", help="Node id (1 or more).", parser=parse_node_id)
    ],
    address: Annotated[str, typer.Option("--address", help="host:port it serves on.")],
    location: Annotated[str, typer.Option(help="Failure domain: region.dc.rack.")] = "",
    weight: Annotated[float, typer.Option(help="Relative weight.")] = 1.0,
    roles: Annotated[str, typer.Option(help="storage,sequencer")] = "storage,sequencer",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            help="Port of its Prometheus /metrics (on 127.0.0.1 unless the node is given "
            "--metrics HOST:PORT); `nodes list` shows it.",
        ),
    ] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a node to the configuration."""
    config = NodeConfig(
        node_id, address, location, weight, tuple(roles.split(",")), metrics_port=metrics_port
    )
    with open_store(url, create=True) as store:
        store.add_node(config)
    if as_json:
        print_json(config.to_json())
    else:
        console.print(f"added node {node_id} at {address}")


@nodes_app.command("remove")
def nodes_remove(
    node_id: Annotated[int, typer.Argument(help="Node id.")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Remove it even if it is not drained (its copies are lost)."),
    ] = False,
    url: UrlOption = None,
) -> None:
    """Remove a node from the configuration.  Only a drained or rebuilt node
    (AUTHORITATIVE_EMPTY): 'logstrand drain NODE --wait' first."""
    with open_store(url) as store:
        why = removable(store.rebuilding_state(), node_id) if node_id in store.nodes() else None
        if why is not None and not force:
            fail(why, EXIT_FAILED)
        if why is not None:
            err_console.print(
                f"[yellow]warning:[/] {why}; removed anyway (--force): every copy only "
                "it held is lost",
                highlight=False,
            )
        store.remove_node(node_id)
    console.print(f"removed node {node_id}")


@nodes_app.command("list")
def nodes_list(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """List the configured nodes and whether each is alive."""
    with open_store(url) as store:
        nodes = store.nodes()
        alive = store.alive_nodes()
    if as_json:
        print_json([{**n.to_json(), "alive": n.node_id in alive} for n in nodes.values()])
        return
    table = Table()
    for col in ("id", "address", "metrics", "location", "weight", "roles", "state"):
        table.add_column(col)
    for n in sorted(nodes.values(), key=lambda n: n.node_id):
        state = "[green]alive[/]" if n.node_id in alive else "[red]dead[/]"
        # Where Prometheus scrapes it (/metrics on that port of the node's host).
        metrics = "-" if n.metrics_port is None else str(n.metrics_port)
        table.add_row(
            str(n.node_id),
            n.address,
            metrics,
            n.location or "-",
            f"{n.weight:g}",
            ",".join(n.roles),
            state,
        )
    console.print(table)


def status(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Every node: address, state (alive, dead, unreachable, or "no space": alive
    but below its --min-free floor, serving reads only), its authoritative
    status (storage_state: FULLY_AUTHORITATIVE, UNAVAILABLE, REBUILDING,
    UNDERREPLICATION, AUTHORITATIVE_EMPTY), the logs it sequences, partitions,
    disk used and free, and ranges of corrupt copies it found; then the
    rebuilding under way, per donor (records and bytes re-created).

    Exits with 1 when a node is not alive (dead, or alive in the membership but
    not answering).
    """

    with open_store(url) as store:
        nodes = store.nodes()
        members = store.members()
        alive = frozenset(members)
        store_url = store.url
        rebuilding = rebuilding_doc(store, alive)
    rows: list[dict[str, Any]] = []
    with connect_client(require_url(url)) as client:
        for node_id, cfg in sorted(nodes.items()):
            st = client.node_status(node_id) if node_id in alive else None
            storage = rebuilding["storage_state"].get(node_id)
            rows.append(status_row(node_id, cfg, st, members.get(node_id), alive, storage))
    unhealthy = any(r["state"] not in ("alive", "no space") for r in rows)
    if as_json:
        print_json({"epoch_store": store_url, "nodes": rows, **rebuilding})
        if unhealthy:
            raise typer.Exit(EXIT_FAILED)
        return
    console.print(f"epoch store: {store_url}", highlight=False)
    console.print(_status_table(rows))
    _print_rebuilding(rebuilding)
    if unhealthy:
        raise typer.Exit(EXIT_FAILED)


def _status_table(rows: list[dict[str, Any]]) -> Table:
    table = Table()
    cols = ("node", "address", "location", "state", "storage", "sequences", "clock", "partitions")
    for col in (*cols, "disk", "write amp", "free", "corrupt copies"):
        # Addresses and locations whole, however narrow the terminal: the
        # other columns wrap instead.
        widest = max((len(r[col] or "") for r in rows), default=0) if col in _WHOLE else 0
        table.add_column(col, min_width=widest or None, no_wrap=col in _WHOLE)
    for r in rows:
        state = r["state"]
        colour = {"alive": "green", "dead": "red"}.get(state, "yellow")
        table.add_row(
            str(r["node_id"]),
            r["address"],
            r["location"] or "-",
            f"[{colour}]{state}[/]",
            _storage(r["storage_state"]),
            _sequences(r),
            _clock(r["clock_offset_ms"]),
            "-" if r["partitions"] is None else str(r["partitions"]),
            "-" if r["disk_bytes"] is None else format_bytes(r["disk_bytes"]),
            "-" if r["write_amplification"] is None else f"{r['write_amplification']:.2f}",
            "-" if r["free_bytes"] is None else format_bytes(r["free_bytes"]),
            "-" if r["corrupt_copies"] is None else corrupt_text(r["corrupt_copies"]),
        )
    return table


_WHOLE = ("address", "location")


def _storage(state: str | None) -> str:
    short = {
        "FULLY_AUTHORITATIVE": "[green]full[/]",
        "UNAVAILABLE": "[red]unavailable[/]",
        "REBUILDING": "[yellow]rebuilding[/]",
        "UNDERREPLICATION": "[red]underreplicated[/]",
        "AUTHORITATIVE_EMPTY": "empty",
    }
    return "-" if state is None else short.get(state, state)


def _print_rebuilding(doc: dict[str, Any]) -> None:
    run = doc["rebuilding"]
    if run is None:
        return
    what = ", ".join(f"{n} ({run['modes'].get(str(n), '?')})" for n in run["nodes"])
    console.print(
        f"rebuilding {run['id']} of nodes {what}: {run['donors_done']}/{len(run['donors'])} "
        f"donors done, {run['records']:,} records, {format_bytes(run['bytes'])}",
        highlight=False,
    )
    for donor, p in sorted(run["per_donor"].items(), key=lambda kv: int(kv[0])):
        console.print(
            f"  donor {donor}: {'done' if p['done'] else 'working'}, {p['records']:,} records, "
            f"{format_bytes(p['bytes'])}",
            highlight=False,
        )


def corrupt_text(ranges: int) -> str:
    """Ranges of unreadable copies a node reported since it started (red when any)."""
    return f"[red]{ranges}[/]" if ranges else "0"


def _sequences(row: dict[str, Any]) -> str:
    """The logs a node sequences, or why it takes no sequencers."""
    if not row["why_not"]:
        return _ids(row["sequencing"])
    now = f"{_ids(row['sequencing'])}; " if row["sequencing"] else ""
    return f"[yellow]{now}takes none: {row['why_not']}[/]"


def _clock(offset_ms: int | None) -> str:
    """A node's clock against the cluster's (yellow past a second)."""
    if offset_ms is None:
        return "-"
    text = describe_offset(offset_ms) if abs(offset_ms) >= 1000 else "ok"
    return f"[yellow]{text}[/]" if abs(offset_ms) >= 1000 else text


def _ids(ids: list[int]) -> str:
    if not ids:
        return "-"
    names = [log_name(i) for i in ids]
    if len(names) > 8:
        return " ".join(names[:8]) + f" and {len(names) - 8} more"
    return " ".join(names)

"""``logstrand rebuild``, ``drain``, ``undrain`` and ``cluster set rebuild-grace``
(docs/rebuilding.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .._units import format_bytes, format_duration_ms, parse_duration_ms
from ..rebuilding import Mode, StorageState
from ._common import EXIT_FAILED, JsonOption, UrlOption, console, fail, open_store, print_json

if TYPE_CHECKING:
    from ..epochstore import EpochStore
    from ..rebuilding import RebuildingState

cluster_app = typer.Typer(help="Cluster-wide settings.", no_args_is_help=True)
cluster_set_app = typer.Typer(help="Change a cluster-wide setting.", no_args_is_help=True)
cluster_app.add_typer(cluster_set_app, name="set")

WaitOption = Annotated[
    bool, typer.Option("--wait", help="Show the progress and return when it has ended.")
]
NodeArgument = Annotated[int, typer.Argument(help="Node id.", min=0)]


def rebuilding_doc(store: EpochStore, alive: frozenset[int]) -> dict[str, Any]:
    """Each node's ``storage_state`` and the run under way, for ``status --json``."""
    st = store.rebuilding_state()
    states = {
        n: st.storage_state(n, n in alive).value
        for n, cfg in store.nodes().items()
        if "storage" in cfg.roles
    }
    run: dict[str, Any] | None = None
    if st.run is not None:
        progress = store.run_progress()
        run = {
            **st.run.to_json(),
            "modes": {str(n): st.shards[n].mode.value for n in st.run.nodes if n in st.shards},
            "donors_done": sum(p.done for p in progress.values()),
            "records": sum(p.records for p in progress.values()),
            "bytes": sum(p.bytes for p in progress.values()),
            "per_donor": {str(d): p.to_json() for d, p in progress.items()},
        }
    return {
        "storage_state": states,
        "rebuilding": run,
        "last": st.last,
        "grace_ms": st.grace_ms,
    }


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

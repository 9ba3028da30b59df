"""``logstrand logs ...`` and ``logstrand nodes ...``: the cluster configuration."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from .._units import format_bytes, format_duration_ms
from ..epochstore import COMPRESSIONS, DURABILITIES, SCOPES, LogAttributes, LogRange, NodeConfig
from ..epochstore import parse_log_range as _parse_range
from ..errors import InvalidArgumentError
from ..rebuilding._core import removable
from ._common import (
    EXIT_FAILED,
    JsonOption,
    LogArg,
    UrlOption,
    console,
    duration_option,
    err_console,
    fail,
    open_store,
    parse_node_id,
    print_json,
    size_option,
)

logs_app = typer.Typer(help="Create, list, change and remove logs.", no_args_is_help=True)
nodes_app = typer.Typer(help="The nodes of the cluster configuration.", no_args_is_help=True)


def _range(text: str) -> tuple[int, int]:
    try:
        return _parse_range(text)
    except InvalidArgumentError as exc:
        fail(exc.args[0])


def _choice(value: str | None, allowed: tuple[str, ...], name: str) -> str | None:
    if value is not None and value not in allowed:
        fail(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _fail_zero() -> NoReturn:
    fail("--retention-bytes must be more than 0")


def _dur(ms: int | None) -> str:
    return "forever" if ms is None else format_duration_ms(ms)


def _attributes_row(r: LogRange) -> list[str]:
    a = r.attributes
    rng = str(r.first) if r.first == r.last else f"{r.first}..{r.last}"
    cleanup = a.cleanup_policy
    if a.compacted:
        cleanup += f" (delete-retention {_dur(a.delete_retention_ms)})"
    return [
        rng,
        str(a.replication_factor),
        a.replicate_across,
        "all" if a.nodeset_size is None else str(a.nodeset_size),
        _dur(a.retention_ms)
        + ("" if a.retention_bytes is None else f", {format_bytes(a.retention_bytes)}"),
        cleanup,
        a.durability,
        a.compression,
    ]


ReplicationOpt = Annotated[
    int | None, typer.Option("--replication", "-r", help="Copies of each record (R).")
]
NodesetOpt = Annotated[
    int | None, typer.Option("--nodeset", help="Nodes that hold the log (default: all).")
]
AcrossOpt = Annotated[
    str | None, typer.Option("--replicate-across", help=f"Failure domain: {', '.join(SCOPES)}.")
]
RetentionOpt = Annotated[
    str | None, typer.Option("--retention", help="Trim records older than this, e.g. 7d.")
]
RetentionBytesOpt = Annotated[
    str | None,
    typer.Option(
        "--retention-bytes",
        help="Keep about this much of the log (one copy of each record), e.g. 10GiB; "
        "the oldest records are trimmed first.",
    ),
]
CompactOpt = Annotated[bool, typer.Option("--compact", help="Keep the latest record per key.")]
DelRetOpt = Annotated[
    str | None, typer.Option("--delete-retention", help="How long tombstones stay (default 1d).")
]
LagOpt = Annotated[
    str | None, typer.Option("--min-compaction-lag", help="Never compact younger records.")
]
MaxLagOpt = Annotated[
    str | None, typer.Option("--max-compaction-lag", help="Compact records at most this old.")
]
RatioOpt = Annotated[
    float | None,
    typer.Option("--min-cleanable-ratio", help="Dirty share that triggers cleaning (0-1)."),
]
DurabilityOpt = Annotated[
    str | None, typer.Option("--durability", help=f"Store writes: {', '.join(DURABILITIES)}.")
]
CompressionOpt = Annotated[
    str | None,
    typer.Option(
        "--compression",
        help=f"How clients compress batches: {', '.join(COMPRESSIONS)} (default none).",
    ),
]


def _changes(
    replication: int | None,
    nodeset: int | None,
    replicate_across: str | None,
    retention: str | None,
    compact: bool | None,
    delete_retention: str | None,
    min_compaction_lag: str | None,
    max_compaction_lag: str | None,
    min_cleanable_ratio: float | None,
    durability: str | None,
    compression: str | None = None,
    retention_bytes: str | None = None,
) -> dict[str, Any]:
    changes: dict[str, Any] = {
        "retention_bytes": None
        if retention_bytes is None
        else size_option(retention_bytes, "--retention-bytes") or _fail_zero(),
        "replication_factor": replication,
        "nodeset_size": nodeset,
        "replicate_across": _choice(replicate_across, SCOPES, "--replicate-across"),
        "retention_ms": duration_option(retention, "--retention"),
        "delete_retention_ms": duration_option(delete_retention, "--delete-retention"),
        "min_compaction_lag_ms": duration_option(min_compaction_lag, "--min-compaction-lag"),
        "max_compaction_lag_ms": duration_option(max_compaction_lag, "--max-compaction-lag"),
        "min_cleanable_ratio": min_cleanable_ratio,
        "durability": _choice(durability, DURABILITIES, "--durability"),
        "compression": _choice(compression, COMPRESSIONS, "--compression"),
    }
    if compact is not None:
        retained = retention or retention_bytes
        policy = "compact,delete" if compact and retained else "compact" if compact else "delete"
        changes["cleanup_policy"] = policy
    return {k: v for k, v in changes.items() if v is not None}


@logs_app.command("create")
def create(
    logs: Annotated[str, typer.Argument(help="A log id or a range FIRST..LAST.")],
    replication: ReplicationOpt = None,
    nodeset: NodesetOpt = None,
    replicate_across: AcrossOpt = None,
    retention: RetentionOpt = None,
    compact: CompactOpt = False,
    delete_retention: DelRetOpt = None,
    min_compaction_lag: LagOpt = None,
    max_compaction_lag: MaxLagOpt = None,
    min_cleanable_ratio: RatioOpt = None,
    durability: DurabilityOpt = None,
    compression: CompressionOpt = None,
    retention_bytes: RetentionBytesOpt = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a range of logs with the given attributes."""
    first, last = _range(logs)
    if not compact and (delete_retention or min_compaction_lag or max_compaction_lag):
        fail("--delete-retention and the compaction lags only apply with --compact")
    changes = _changes(
        replication,
        nodeset,
        replicate_across,
        retention,
        compact,
        delete_retention,
        min_compaction_lag,
        max_compaction_lag,
        min_cleanable_ratio,
        durability,
        compression,
        retention_bytes,
    )
    attributes = LogAttributes.from_json({**LogAttributes().to_json(), **changes})
    with open_store(url) as store:
        created = store.create_logs(first, last, attributes)
    if as_json:
        print_json(created.to_json())
    else:
        console.print(f"created logs {first}..{last}")


@logs_app.command("update")
def update(
    logs: Annotated[str, typer.Argument(help="An existing range FIRST..LAST (or one log id).")],
    replication: ReplicationOpt = None,
    nodeset: NodesetOpt = None,
    replicate_across: AcrossOpt = None,
    retention: RetentionOpt = None,
    compact: Annotated[
        bool | None, typer.Option("--compact/--no-compact", help="Turn compaction on or off.")
    ] = None,
    delete_retention: DelRetOpt = None,
    min_compaction_lag: LagOpt = None,
    max_compaction_lag: MaxLagOpt = None,
    min_cleanable_ratio: RatioOpt = None,
    durability: DurabilityOpt = None,
    compression: CompressionOpt = None,
    retention_bytes: RetentionBytesOpt = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change attributes of an existing range; the others stay as they are."""
    first, last = _range(logs)
    changes = _changes(
        replication,
        nodeset,
        replicate_across,
        retention,
        compact,
        delete_retention,
        min_compaction_lag,
        max_compaction_lag,
        min_cleanable_ratio,
        durability,
        compression,
        retention_bytes,
    )
    if not changes:
        fail("nothing to change: give at least one attribute option")
    with open_store(url) as store:
        updated = store.update_logs(first, last, **changes)
    if as_json:
        print_json(updated.to_json())
    else:
        console.print(f"updated logs {first}..{last}: {', '.join(sorted(changes))}")


@logs_app.command("remove")
def remove(
    logs: Annotated[str, typer.Argument(help="An existing range FIRST..LAST (or one log id).")],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove a range of logs from the configuration."""
    first, last = _range(logs)
    with open_store(url) as store:
        store.remove_logs(first, last)
    if as_json:
        print_json({"removed": [first, last]})
    else:
        console.print(f"removed logs {first}..{last}")


@logs_app.command("list")
def list_logs(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """List every range of logs with its attributes."""
    with open_store(url) as store:
        ranges = store.log_ranges()
    if as_json:
        print_json([r.to_json() for r in ranges])
        return
    table = Table()
    for col in ("logs", "R", "across", "nodeset", "retention", "cleanup", "durability", "codec"):
        table.add_column(col)
    for r in ranges:
        table.add_row(*_attributes_row(r))
    console.print(table)


@logs_app.command("show")
def show(
    log: LogArg,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one log: its attributes, epochs and nodesets."""
    with open_store(url) as store:
        rng = store.log_range(log)
        epochs = store.log_epochs(log)
        lce = store.last_clean_epoch(log)
    if as_json:
        print_json(
            {
                "log_id": log,
                "range": [rng.first, rng.last],
                "attributes": rng.attributes.to_json(),
                "next_epoch": epochs.next_epoch,
                "last_clean_epoch": lce,
                "history": [h.to_json() for h in epochs.history],
            }
        )
        return
    row = _attributes_row(rng)
    console.print(f"log {log} (range {row[0]})")
    for label, value in zip(
        (
            "replication",
            "across",
            "nodeset size",
            "retention",
            "cleanup",
            "durability",
            "compression",
        ),
        row[1:],
        strict=True,
    ):
        console.print(f"  {label:<14} {value}")
    console.print(f"  {'next epoch':<14} {epochs.next_epoch}")
    console.print(f"  {'last clean':<14} {lce}")
    for h in epochs.history:
        console.print(f"  epoch {h.since}+: nodeset {list(h.nodeset)}, R={h.replication_factor}")


@nodes_app.command("add")
def nodes_add(
    node_id: Annotated[
        int, typer.Option("--id", help="Node id (1 or more).", parser=parse_node_id)
    ],
    address: Annotated[str, typer.Option("--address", help="host:port it serves on.")],
    location: Annotated[str, typer.Option(help="Failure domain: region.dc.rack.")] = "",
    weight: Annotated[float, typer.Option(help="Relative weight.")] = 1.0,
    roles: Annotated[str, typer.Option(help="storage,sequencer")] = "storage,sequencer",
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a node to the configuration."""
    config = NodeConfig(node_id, address, location, weight, tuple(roles.split(",")))
    with open_store(url) as store:
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
    for col in ("id", "address", "location", "weight", "roles", "state"):
        table.add_column(col)
    for n in sorted(nodes.values(), key=lambda n: n.node_id):
        state = "[green]alive[/]" if n.node_id in alive else "[red]dead[/]"
        table.add_row(
            str(n.node_id), n.address, n.location or "-", f"{n.weight:g}", ",".join(n.roles), state
        )
    console.print(table)

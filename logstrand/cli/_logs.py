"""``logstrand logs ...``: the logs of the cluster configuration and their attributes."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table

from .._units import format_bytes, format_duration_ms
from ..epochstore import (
    COMPRESSIONS,
    DURABILITIES,
    SCOPES,
    LogAttributes,
    LogRange,
    named_logs,
)
from ..errors import InvalidArgumentError, NotFoundError
from ..logsdb import LogsDBOptions
from ..records import INTERNAL_LOGS, POSITIONS_LOGS, log_name
from ..records import parse_log_range as _parse_range
from ..types import format_lsn
from ._common import (
    JSON,
    REQUIRED,
    URL,
    JsonOption,
    LogArg,
    UrlOption,
    connect_client,
    console,
    declared,
    duration_option,
    err_console,
    fail,
    keyword,
    open_store,
    print_json,
    require_url,
    size_option,
)
from ._rebalance import rebalance

if TYPE_CHECKING:
    from ..epochstore import EpochStore

logs_app = typer.Typer(help="Create, list, change and remove logs.", no_args_is_help=True)


def _range(text: str) -> tuple[int, int]:
    try:
        return _parse_range(text)
    except InvalidArgumentError as exc:
        fail(exc.args[0])


def _resolve(store: EpochStore, text: str) -> tuple[int, int]:
    """A range ``FIRST..LAST``, one log id, or the name of a range (a name
    may start with a digit, as ``1st-orders``; it is never digits alone)."""
    try:
        first, last = _parse_range(text)
    except InvalidArgumentError:
        return (r := store.log_range_named(text)).first, r.last
    if first == last:
        # One log id names the range it is in only when that range is just
        # it: attributes belong to a whole range, and changing 100..199 when
        # asked about 101 would surprise; say which range it is instead.
        try:
            r = store.log_range(first)
        except NotFoundError:
            fail(f"log {first} is not in the configuration (`logstrand logs list`)", 1)
        if (r.first, r.last) != (first, last):
            named = f" or its name {r.name!r}" if r.name else ""
            fail(
                f"log {first} is part of the range {r.first}..{r.last}: attributes belong to "
                f"a whole range; give {r.first}..{r.last}{named}",
                1,
            )
    return first, last


def _parts(store: EpochStore, text: str) -> list[LogRange]:
    """The ranges a name has (none when ``text`` is a range or a log id)."""
    try:
        _parse_range(text)
    except InvalidArgumentError:
        named = named_logs(store.log_ranges()).get(text)
        return [] if named is None else list(named.parts)
    return []


def _choice(value: str | None, allowed: tuple[str, ...], name: str) -> str | None:
    if value is not None and value not in allowed:
        fail(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _fail_zero() -> NoReturn:
    fail("--retention-bytes must be more than 0")


def _dur(ms: int | None) -> str:
    return "forever" if ms is None else format_duration_ms(ms)


def _attributes_row(r: LogRange, start: int = 0) -> list[str]:
    """``start``: the partition index of the range's first log in its name
    (a part after the first of a topic that grew)."""
    a = r.attributes
    rng = str(r.first) if r.first == r.last else f"{r.first}..{r.last}"
    if r.first in INTERNAL_LOGS:
        # The groups' positions logs, under the name grants and `read` take
        # (their ids, past 2^63, mean nothing to a reader of this table).
        whole = (r.first, r.last) == (POSITIONS_LOGS[0], POSITIONS_LOGS[-1])
        rng = "positions" if whole else f"{log_name(r.first)}..{log_name(r.last)}"
        rng += " (internal: consumer groups' positions)"
    if r.name is not None and start:
        rng += f" ({r.name}, partitions {start}..{start + r.last - r.first})"
    elif r.name is not None:
        rng += f" ({r.name})"
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


#: The attributes' options, after which ``--compact`` comes: (parameter, type, flags, help).
_BEFORE_COMPACT: tuple[tuple[str, type, tuple[str, ...], str], ...] = (
    ("replication", int, ("--replication", "-r"), "Copies of each record (R)."),
    ("nodeset", int, ("--nodeset",), "Nodes that hold the log (default: all)."),
    ("replicate_across", str, ("--replicate-across",), f"Failure domain: {', '.join(SCOPES)}."),
    ("retention", str, ("--retention",), "Trim records older than this, e.g. 7d."),
)
_AFTER_COMPACT: tuple[tuple[str, type, tuple[str, ...], str], ...] = (
    ("delete_retention", str, ("--delete-retention",), "How long tombstones stay (default 1d)."),
    ("min_compaction_lag", str, ("--min-compaction-lag",), "Never compact younger records."),
    ("max_compaction_lag", str, ("--max-compaction-lag",), "Compact records at most this old."),
    (
        "min_cleanable_ratio",
        float,
        ("--min-cleanable-ratio",),
        "Dirty share that triggers cleaning (0-1).",
    ),
    ("durability", str, ("--durability",), f"Store writes: {', '.join(DURABILITIES)}."),
    (
        "compression",
        str,
        ("--compression",),
        f"How clients compress batches: {', '.join(COMPRESSIONS)} (default none).",
    ),
    (
        "retention_bytes",
        str,
        ("--retention-bytes",),
        "Keep at least this much of the log (one copy of each record), e.g. 10GiB; "
        "older partitions beyond it are trimmed, oldest first.",
    ),
    (
        "tier_after",
        str,
        ("--tier-after",),
        "Move records older than this to the object store (nodes' --tier-url), e.g. 1d.",
    ),
    (
        "local_retention",
        str,
        ("--local-retention",),
        "What of a tiered log the nodes' disks keep: an age (1d) or a size (10GiB).",
    ),
)


def _attribute_options(compact: inspect.Parameter) -> list[inspect.Parameter]:
    """The options of ``logs create`` and ``logs update``: one per attribute."""

    def made(table: tuple[tuple[str, type, tuple[str, ...], str], ...]) -> list[inspect.Parameter]:
        return [
            keyword(name, kind | None, None, typer.Option(*flags, help=text))
            for name, kind, flags, text in table
        ]

    return [*made(_BEFORE_COMPACT), compact, *made(_AFTER_COMPACT), URL, JSON]


def _changes(p: dict[str, Any]) -> dict[str, Any]:
    """The attributes the options give (the ones not given left out)."""
    retention_bytes = p["retention_bytes"]
    changes: dict[str, Any] = {
        "retention_bytes": None
        if retention_bytes is None
        else size_option(retention_bytes, "--retention-bytes") or _fail_zero(),
        "replication_factor": p["replication"],
        "nodeset_size": p["nodeset"],
        "replicate_across": _choice(p["replicate_across"], SCOPES, "--replicate-across"),
        "retention_ms": duration_option(p["retention"], "--retention"),
        "min_cleanable_ratio": p["min_cleanable_ratio"],
        "durability": _choice(p["durability"], DURABILITIES, "--durability"),
        "compression": _choice(p["compression"], COMPRESSIONS, "--compression"),
    }
    changes["tier_after_ms"] = duration_option(p["tier_after"], "--tier-after")
    local = p["local_retention"]
    if local is not None:
        if local.strip()[-1:].upper() == "B":  # a size: 10GiB, 500MB
            changes["local_retention_bytes"] = size_option(local, "--local-retention")
        else:
            changes["local_retention_ms"] = duration_option(local, "--local-retention")
    for name in ("delete_retention", "min_compaction_lag", "max_compaction_lag"):
        changes[f"{name}_ms"] = duration_option(p[name], "--" + name.replace("_", "-"))
    if p["compact"] is not None:
        compact, retained = p["compact"], p["retention"] or retention_bytes
        policy = "compact,delete" if compact and retained else "compact" if compact else "delete"
        changes["cleanup_policy"] = policy
    _warn_short_retention(changes.get("retention_ms"))
    return {k: v for k, v in changes.items() if v is not None}


def _warn_short_retention(retention_ms: int | None) -> None:
    """Retention drops whole partitions: one shorter than a partition's span
    keeps records about a partition's span (nodes' --partition-duration)."""
    span = LogsDBOptions().partition_duration_ms
    if retention_ms is not None and retention_ms < span:
        err_console.print(
            f"[yellow]warning:[/] records go when the partition that holds them is older "
            f"than the retention; with the nodes' default --partition-duration "
            f"({format_duration_ms(span)}) a retention of {format_duration_ms(retention_ms)} "
            f"keeps them up to about {format_duration_ms(span + retention_ms)}",
            highlight=False,
        )


_NAME = keyword(
    "name",
    str | None,
    None,
    typer.Option(
        "--name",
        help="Name the range (as Kafka names a topic: the Kafka front serves it as one); "
        "other commands then take the name where they take the range (update: '' takes "
        "the name away).",
    ),
)


@logs_app.command("create")
@declared(
    keyword("logs", str, REQUIRED, typer.Argument(help="A log id or a range FIRST..LAST.")),
    _NAME,
    *_attribute_options(
        keyword(
            "compact",
            bool,
            False,
            typer.Option("--compact", help="Keep the latest record per key."),
        )
    ),
)
def create(**params: Any) -> None:
    """Create a range of logs with the given attributes."""
    first, last = _range(params["logs"])
    lags = ("delete_retention", "min_compaction_lag", "max_compaction_lag")
    if not params["compact"] and any(params[name] for name in lags):
        fail("--delete-retention and the compaction lags only apply with --compact")
    changes = _changes(params)
    attributes = LogAttributes.from_json({**LogAttributes().to_json(), **changes})
    with open_store(params["url"]) as store:
        created = store.create_logs(first, last, attributes, name=params["name"])
    if params["as_json"]:
        print_json(created.to_json())
    else:
        named = "" if created.name is None else f" named {created.name}"
        console.print(f"created logs {first}..{last}{named}")


@logs_app.command("update")
@declared(
    keyword(
        "logs",
        str,
        REQUIRED,
        typer.Argument(
            help="An existing range FIRST..LAST, or its name (a range of one log: its id)."
        ),
    ),
    _NAME,
    *_attribute_options(
        keyword(
            "compact",
            bool | None,
            None,
            typer.Option("--compact/--no-compact", help="Turn compaction on or off."),
        )
    ),
)
def update(**params: Any) -> None:
    """Change attributes of an existing range; the others stay as they are."""
    changes = _changes(params)
    name = params["name"]
    if not changes and name is None:
        fail("nothing to change: give at least one attribute option or --name")
    with open_store(params["url"]) as store:
        parts = _parts(store, params["logs"])
        if len(parts) > 1:
            # A name over several ranges (a topic that grew): its attributes
            # change on every part at once; a new name would split it.
            if name is not None:
                fail(f"{params['logs']} spans {len(parts)} ranges: it cannot be renamed")
            updated = store.update_logs_named(params["logs"], **changes)[0]
            first, last = parts[0].first, parts[-1].last
        else:
            first, last = _resolve(store, params["logs"])
            if name is not None:
                updated = store.name_logs(first, last, name or None)
            if changes:
                updated = store.update_logs(first, last, **changes)
    if params["as_json"]:
        print_json(updated.to_json())
    else:
        what = sorted(changes) + ([] if name is None else ["name"])
        console.print(f"updated logs {first}..{last}: {', '.join(what)}")


@logs_app.command("remove")
def remove(
    logs: Annotated[
        str,
        typer.Argument(
            help="An existing range FIRST..LAST, or its name (a range of one log: its id)."
        ),
    ],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove a range of logs from the configuration."""
    with open_store(url) as store:
        if len(parts := _parts(store, logs)) > 1:
            store.remove_logs_named(logs)  # every part of the name
            first, last = parts[0].first, parts[-1].last
        else:
            first, last = _resolve(store, logs)
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
    # The logs and their name stay on one line: the other columns wrap.
    table.add_column("logs", no_wrap=True)
    for col in ("R", "across", "nodeset", "retention", "cleanup", "durability", "codec"):
        table.add_column(col)
    names = named_logs(ranges)
    for r in ranges:
        start = 0 if r.name is None else names[r.name].index(r.first) or 0
        table.add_row(*_attributes_row(r, start))
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
                "name": rng.name,
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


@logs_app.command("tails")
def tails(
    logs: Annotated[str, typer.Argument(help="A log id or a range FIRST..LAST.")],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """The tail LSN of every log of a range, asking each node once per 4,096 logs."""
    first, last = _range(logs)
    with connect_client(require_url(url)) as client:
        got = client.tail_lsns(range(first, last + 1))
    if as_json:
        print_json([{"log_id": log, "tail_lsn": lsn} for log, lsn in got.items()])
        return
    table = Table()
    table.add_column("log")
    table.add_column("tail")
    for log, lsn in got.items():
        table.add_row(str(log), format_lsn(lsn))
    console.print(table)


# Registered last, so that ``logs --help`` lists it after the others.
logs_app.command("rebalance")(rebalance)

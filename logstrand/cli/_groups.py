"""``logstrand groups``: consumer groups' positions, lag, resets and deletes."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.table import Table

from .._units import parse_time_ms
from ..positions import Position, check_group
from ..types import format_lsn, parse_lsn
from ._common import (
    JsonOption,
    UrlOption,
    connect_client,
    console,
    fail,
    open_store,
    parse_log_id,
    print_json,
    require_url,
)
from ._group_members import kafka_end_offset, members_by_log, members_table

groups_app = typer.Typer(
    help="Consumer groups: committed positions, lag, resets (docs/groups.md).",
    no_args_is_help=True,
)

GroupArgument = Annotated[str, typer.Argument(help="The group's name.", show_default=False)]


def _lsn(lsn: int | None) -> str:
    return "-" if lsn is None else format_lsn(lsn)


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


def _age(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def _group(name: str) -> str:
    try:
        return check_group(name)
    except ValueError as exc:
        fail(str(exc))


@groups_app.command("list")
def groups_list(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Every group with a committed position, and the logs it has them on."""
    with connect_client(require_url(url)) as client:
        groups = client.group_positions()
    if as_json:
        print_json(
            [
                {"group": g, "logs": [p.log_id for p in ps], "last_commit_ms": _last(ps)}
                for g, ps in groups.items()
            ]
        )
        return
    table = Table("group", "logs", "last commit (UTC)")
    for group, positions in groups.items():
        logs = ", ".join(str(p.log_id) for p in positions)
        table.add_row(group, logs, _when(_last(positions)))
    console.print(table)


def _last(positions: list[Position]) -> int:
    return max(p.committed_ms for p in positions)


@groups_app.command("describe")
def groups_describe(
    group: GroupArgument, url: UrlOption = None, as_json: JsonOption = False
) -> None:
    """Per log: the committed LSN, the tail, and the lag in records (an
    estimate from the epochs between them) and in time (the age of the first
    record not yet processed).  For a group with members (client.subscribe's,
    or Kafka consumers'), also its members (each log's row names the member
    it is assigned to) and, for what Kafka consumers committed, the offset,
    the log end offset and the lag in offsets."""
    group = _group(group)
    cluster = require_url(url)
    with connect_client(cluster) as client:
        lags = client.describe_group(group)
        membership = client.group_membership(group)
    rows: list[dict[str, Any]] = [dict(lag.to_json()) for lag in lags]
    with open_store(cluster) as store:
        ranges = [r for r in store.log_ranges() if r.name is not None]
        owners = members_by_log(membership, ranges)
        for row in rows:
            row["member"] = owners.get(row["log_id"])
            if row["offset"] is not None:
                end = kafka_end_offset(store, row["log_id"], row["tail"])
                row["end_offset"] = end
                row["lag_offsets"] = max(0, end - row["offset"])
    if as_json:
        print_json(rows)
        return
    kafka = any(r["offset"] is not None for r in rows)
    table = Table(
        "log", "member", "committed", "committed at (UTC)", "tail", "lag (records)", "lag (time)"
    )
    if kafka:
        table.add_column("offset")
        table.add_column("lag (offsets)")
    for lag, row in zip(lags, rows, strict=True):
        cells = [
            str(lag.log_id),
            str(row["member"] or "-"),
            _lsn(lag.committed),
            _when(lag.committed_ms),
            format_lsn(lag.tail),
            f"{lag.lag_records:,}",
            _age(lag.lag_ms),
        ]
        if kafka:
            cells += (
                ["-", "-"]
                if row["offset"] is None
                else [f"{row['offset']:,}", f"{row['lag_offsets']:,}"]
            )
        table.add_row(*cells)
    console.print(table)
    if membership is not None:
        console.print(members_table(membership))


@groups_app.command("reset")
def groups_reset(
    group: GroupArgument,
    log: Annotated[
        int, typer.Option("--log", help="The log whose position moves.", parser=parse_log_id)
    ],
    to_lsn: Annotated[
        str | None,
        typer.Option("--to-lsn", help="The next read starts at this LSN (123 or e1n5)."),
    ] = None,
    to_time: Annotated[
        str | None,
        typer.Option(
            "--to-time",
            help="The next read starts at the first record at or after this time "
            "(ISO 8601, ms since the epoch, '2h ago').",
        ),
    ] = None,
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="The next read starts at the oldest record.")
    ] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="The next read starts after the tail now.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the change and make none.")
    ] = False,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move a group's position on one log.  Give exactly one --to-* option.

    Stop the group's readers first: a reader or member that is still running
    commits its own position over the new one (nothing refuses the reset).
    """
    group = _group(group)
    chosen = [
        x
        for x, given in (
            ("lsn", to_lsn is not None),
            ("time", to_time is not None),
            ("earliest", to_earliest),
            ("latest", to_latest),
        )
        if given
    ]
    if len(chosen) != 1:
        fail("give exactly one of --to-lsn, --to-time, --to-earliest and --to-latest")
    how = chosen[0]
    value = None
    try:
        if to_lsn is not None:
            value = parse_lsn(to_lsn)
        elif to_time is not None:
            value = parse_time_ms(to_time)
    except ValueError as exc:
        fail(f"--to-{how}: {exc}")
    with connect_client(require_url(url)) as client:
        before, after = client.reset_group(group, log, how, value, dry_run=dry_run)
    if as_json:
        print_json(
            {"group": group, "log_id": log, "before": before, "after": after, "dry_run": dry_run}
        )
        return
    change = f"group {group} log {log}: committed {_lsn(before)} -> {format_lsn(after)}"
    if dry_run:
        console.print(f"{change} (dry run: nothing changed)", highlight=False)
    else:
        console.print(change, highlight=False)


@groups_app.command("delete")
def groups_delete(group: GroupArgument, url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Remove every position of a group (its next reader starts at the oldest record)."""
    group = _group(group)
    with connect_client(require_url(url)) as client:
        logs = client.delete_group(group)
    if as_json:
        print_json({"group": group, "logs": logs})
        return
    console.print(f"group {group}: removed its positions on logs {', '.join(map(str, logs))}")

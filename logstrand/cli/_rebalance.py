"""``logstrand logs rebalance``: logs moved onto the storage nodes there
are now (after nodes were added), a step of logs at a time, each log that
would choose another nodeset given a new epoch (``client.rebalance``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import attrs
import typer

from ..errors import InvalidArgumentError
from ..records import parse_log_range
from ._common import (
    JsonOption,
    UrlOption,
    connect_client,
    console,
    err_console,
    fail,
    print_json,
    require_url,
)

if TYPE_CHECKING:
    # Not at run time: the client's import costs every CLI start 0.1 s.
    from ..client import RebalanceReport


def rebalance(
    logs: Annotated[str, typer.Argument(help="A log id or a range FIRST..LAST.")],
    step: Annotated[
        int,
        typer.Option(
            "--step",
            min=1,
            max=4096,
            help="Logs moved at once; each step waits for its logs' new epochs.",
        ),
    ] = 100,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say which logs would move, and move none.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.1, help="Seconds a step waits for its logs' new epochs."),
    ] = 30.0,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move logs onto the storage nodes there are now (after adding nodes): each log whose
    nodeset would differ gets a new epoch, a step at a time. Written copies stay where they are."""
    try:
        first, last = parse_log_range(logs)
    except InvalidArgumentError as exc:
        fail(exc.args[0])

    def progress(report: RebalanceReport) -> None:
        done = len(report.moved) + len(report.idle) + len(report.stuck)
        err_console.print(f"{done}/{len(report.to_move)} logs done", highlight=False)

    with connect_client(require_url(url)) as client:
        report = client.rebalance(
            range(first, last + 1),
            step=step,
            dry_run=dry_run,
            timeout_s=timeout,
            on_step=None if as_json else progress,
        )
    if as_json:
        print_json({"dry_run": dry_run, **attrs.asdict(report)})
    else:
        _print_rebalance(report, dry_run)
    if report.stuck:
        raise typer.Exit(1)


def _print_rebalance(report: RebalanceReport, dry_run: bool) -> None:
    def some(logs: tuple[int, ...]) -> str:
        shown = ", ".join(map(str, logs[:20]))
        return shown + (f", … ({len(logs)} in all)" if len(logs) > 20 else "")

    console.print(
        f"{report.checked} logs checked; {len(report.to_move)} would choose another nodeset now"
    )
    if dry_run:
        if report.to_move:
            console.print(f"would move: {some(report.to_move)}")
        return
    console.print(f"moved to a new epoch: {len(report.moved)}")
    if report.idle:
        console.print(
            f"no sequencer running, so they move at their next activation: {len(report.idle)}"
        )
    if report.stuck:
        err_console.print(f"[red]no new epoch in time:[/] {some(report.stuck)}", highlight=False)

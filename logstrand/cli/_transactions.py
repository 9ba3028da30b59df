"""``logstrand transactions``: transactional ids and their transactions, as
their coordinators wrote them (docs/transactions.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from ._common import (
    EXIT_FAILED,
    JsonOption,
    UrlOption,
    connect_client,
    console,
    fail,
    print_json,
    require_url,
)

transactions_app = typer.Typer(
    help="Transactional ids: producer, epoch, the open transaction's logs and groups "
    "(docs/transactions.md).",
    no_args_is_help=True,
)

#: What ``list --open`` shows: a transaction that is not over.
_OPEN = ("Ongoing", "PrepareCommit", "PrepareAbort")


def _states(url: str | None) -> dict[str, dict[str, Any]]:
    with connect_client(require_url(url)) as client:
        states: dict[str, dict[str, Any]] = client.transactions()
    return states


@transactions_app.command("list")
def transactions_list(
    url: UrlOption = None,
    as_json: JsonOption = False,
    only_open: Annotated[
        bool, typer.Option("--open", help="Only ids with a transaction not over.")
    ] = False,
) -> None:
    """Every transactional id: its producer id and epoch, its transaction's
    state, and how many logs and which groups it wrote to."""
    states = _states(url)
    if only_open:
        states = {k: v for k, v in states.items() if v["state"] in _OPEN}
    if as_json:
        print_json([{"id": k, **v} for k, v in states.items()])
        return
    table = Table("transactional id", "producer id", "epoch", "state", "logs", "groups")
    for txn_id, s in states.items():
        groups = ", ".join(s.get("groups", ())) or "-"
        table.add_row(
            txn_id, str(s["pid"]), str(s["epoch"]), s["state"], str(len(s["logs"])), groups
        )
    console.print(table)


@transactions_app.command("describe")
def transactions_describe(
    txn_id: Annotated[str, typer.Argument(help="The transactional id.", show_default=False)],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """One transactional id: its state, the logs its transaction wrote to,
    and the positions it holds for its groups until it ends."""
    state = _states(url).get(txn_id)
    if state is None:
        fail(f"no transactional id {txn_id!r}", code=EXIT_FAILED)
    if as_json:
        print_json({"id": txn_id, **state})
        return
    console.print(
        f"transactional id {txn_id}: producer {state['pid']} epoch {state['epoch']}, "
        f"{state['state']}, timeout {state['timeout_ms']} ms"
    )
    console.print("logs: " + (", ".join(map(str, state["logs"])) or "-"))
    table = Table("group", "log", "position (LSN)", "Kafka offset")
    for group, held in state["held"].items():
        for log_id, lsn, offset, _metadata in held:
            table.add_row(group, str(log_id), str(lsn), "-" if offset is None else str(offset))
    if state["held"]:
        console.print(table)


@transactions_app.command("abort")
def transactions_abort(
    txn_id: Annotated[str, typer.Argument(help="The transactional id.", show_default=False)],
    url: UrlOption = None,
) -> None:
    """Abort the id's open transaction, as its timeout would: its producer
    is fenced (its next step fails), its markers are written, and committed
    readers go on past it.  For a producer that is stuck, not gone: one that
    is gone is aborted by its timeout."""
    from ..errors import InvalidArgumentError, NotFoundError

    with connect_client(require_url(url)) as client:
        try:
            client.abort_transaction(txn_id)
        except (NotFoundError, InvalidArgumentError) as exc:
            fail(str(exc), code=EXIT_FAILED)
    console.print(f"transaction of {txn_id} aborted")

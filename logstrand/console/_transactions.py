"""The console's transactions: every transactional id with its producer and
its transaction (as ``logstrand transactions list`` shows them), and an
operator's abort of a stuck one, with a dry run first (docs/transactions.md).

Both need admin in secure mode, as a ``TxnRequest`` does: until grants on
transactional ids exist, a user who could see or abort any id's transaction
could fence another's producer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, NotFoundError
from ..transactions import TXN_ID_RE
from ._actions import flag

if TYPE_CHECKING:
    from ..client import AsyncClient

#: A transaction in these states is not over: an abort applies to it.
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


def _row(txn_id: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": txn_id,
        "producer_id": state["pid"],
        "epoch": state["epoch"],
        "state": state["state"],
        "open": state["state"] in OPEN_STATES,
        "timeout_ms": state["timeout_ms"],
        "logs": state["logs"],
        "groups": state.get("groups", []),
        "held": state.get("held", {}),
    }


async def transactions_doc(client: AsyncClient, only_open: bool, limit: int) -> dict[str, Any]:
    """The transactional ids in id order (the open ones only with
    ``only_open``), ``limit`` of them at most; ``total`` and ``open`` count
    all of them."""
    states = await client.transactions()
    rows = [_row(k, v) for k, v in states.items()]
    opened = sum(1 for r in rows if r["open"])
    if only_open:
        rows = [r for r in rows if r["open"]]
    return {"total": len(states), "open": opened, "transactions": rows[:limit]}


async def abort(client: AsyncClient, txn_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Abort ``txn_id``'s open transaction (``client.abort_transaction``);
    with ``dry_run``, only what it would abort: the state, logs and groups."""
    dry_run = flag(body, "dry_run")
    if not TXN_ID_RE.fullmatch(txn_id):
        raise InvalidArgumentError(f"not a transactional id: {txn_id!r:.60}")
    state = (await client.transactions()).get(txn_id)
    if state is None:
        raise NotFoundError(f"no transactional id {txn_id!r}")
    row = _row(txn_id, state)
    if not row["open"]:
        raise InvalidArgumentError(f"transactional id {txn_id!r} has no open transaction")
    if not dry_run:
        await client.abort_transaction(txn_id)
    return {
        "id": txn_id,
        "dry_run": dry_run,
        "state_before": row["state"],
        "logs": row["logs"],
        "groups": row["groups"],
        "aborted": not dry_run,
    }

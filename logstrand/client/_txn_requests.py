"""What a client asks of a transactional id's coordinator: any request,
found again when the coordinator moved and asked again while the id is
busy (``ask_coordinator``); a prepared transaction's commit or abort from
any client (``end_prepared``); an operator's abort (``abort_transaction``).
``Transaction`` (``_transaction``) is the producer's side."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import (
    AccessDeniedError,
    FencedError,
    InvalidArgumentError,
    LogstrandError,
    NotFoundError,
    Status,
    TransientError,
)
from ..positions import positions_log_of
from ..transactions import TXN_ID_RE, TxnError
from ..wire import TXN_PROTOCOL, TXN_TAG_MAX, TxnOp, TxnReply, TxnRequest
from ._coordinators import CoordinatorClient, coordinator_node

if TYPE_CHECKING:
    from collections.abc import Callable

#: A request to the coordinator is tried again for this long at most (a
#: coordinator moving, or the markers of the id's last transaction).
COORDINATOR_PATIENCE_S = 30.0
#: How long one answer of the coordinator is waited for.
ANSWER_TIMEOUT_S = 15.0
FENCED_ERRORS = (TxnError.PRODUCER_FENCED, TxnError.INVALID_PRODUCER_EPOCH)


async def ask_coordinator(
    client: CoordinatorClient,
    txn_id: str,
    make: Callable[[int], TxnRequest],
    *,
    patience_s: float = COORDINATOR_PATIENCE_S,
) -> TxnReply:
    """Send ``make(request_id)`` to the coordinator of ``txn_id`` until it
    answers with a verdict (OK status; its ``error`` may refuse): found
    again when it did not answer or moved, asked again while it reads the
    id back or the id is busy (CONCURRENT_TRANSACTIONS)."""
    if not TXN_ID_RE.fullmatch(txn_id):
        raise InvalidArgumentError(f"not a transactional id: {txn_id!r:.60}")
    plog = positions_log_of(txn_id)
    deadline = trio.current_time() + patience_s
    delay, again, why = 0.05, False, "no answer"
    while True:
        reply = None
        try:
            node = await coordinator_node(
                client, plog, again=again, protocol=TXN_PROTOCOL, what=f"transaction {txn_id}"
            )
            reply = await client.ask_node(node, make, timeout_s=ANSWER_TIMEOUT_S)
        except TransientError as exc:
            why = str(exc)
        again = reply is None or reply.status == Status.REDIRECTED
        if reply is not None:
            status = Status(reply.status)
            if status == Status.OK and reply.error != TxnError.CONCURRENT_TRANSACTIONS:
                return reply  # type: ignore[no-any-return]
            if status == Status.ACCESS:
                raise AccessDeniedError(reply.message or "refused")
            if status == Status.INVALID_PARAM:
                raise InvalidArgumentError(reply.message)
            if status not in (Status.OK, Status.REDIRECTED, Status.AGAIN):
                raise LogstrandError(reply.message, status)
            why = reply.message or status.name
        if trio.current_time() + delay > deadline:
            raise TransientError(f"transaction {txn_id}: the coordinator did not take it ({why})")
        await trio.sleep(delay)
        delay = min(1.0, delay * 2)


@attrs.frozen
class Prepared:
    """A transaction left open by ``Transaction.prepare``: what commits or
    aborts it from another client."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


async def end_prepared(
    client: CoordinatorClient, prepared: Prepared, *, commit: bool, tag: str = ""
) -> None:
    """``AsyncClient.commit_prepared`` / ``abort_prepared``."""
    if len(tag) > TXN_TAG_MAX:
        raise InvalidArgumentError(f"a tag of at most {TXN_TAG_MAX} characters")
    op = TxnOp.COMMIT if commit else TxnOp.ABORT
    txn_id = prepared.transactional_id

    def make(rid: int) -> TxnRequest:
        return TxnRequest(
            rid, int(op), txn_id, prepared.producer_id, prepared.producer_epoch, tag=tag
        )

    reply = await ask_coordinator(client, txn_id, make)
    if reply.error in FENCED_ERRORS:
        if not commit:
            return  # whoever fenced it aborted it
        raise FencedError(
            f"transaction {txn_id}: not committed, a newer producer took over or its timeout "
            f"aborted it ({reply.message})",
            Status.FENCED,
        )
    if reply.error == TxnError.INVALID_TXN_STATE and not commit:
        return  # decided already
    if reply.error:
        raise LogstrandError(f"transaction {txn_id}: {reply.message}")


async def abort_transaction(client: CoordinatorClient, txn_id: str) -> None:
    """``AsyncClient.abort_transaction``."""

    def make(rid: int) -> TxnRequest:
        return TxnRequest(rid, int(TxnOp.FORCE_ABORT), txn_id)

    reply = await ask_coordinator(client, txn_id, make)
    if reply.error == TxnError.INVALID_PRODUCER_ID_MAPPING:
        raise NotFoundError(f"no transactional id {txn_id!r}")
    if reply.error == TxnError.INVALID_TXN_STATE:
        raise InvalidArgumentError(f"transactional id {txn_id!r} has no open transaction")
    if reply.error:
        raise LogstrandError(f"transaction {txn_id}: {reply.message}")

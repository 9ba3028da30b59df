"""The transaction coordinator of a node, for logstrand's own producers
(``client.transaction``) and operators (``transactions abort``): the node's
``TxnFront``, which its Kafka front shares, serving ``TxnRequest`` (wire).

One coordinator per node for both protocols, so a transactional id means
one producer whichever protocol it speaks, and a Kafka producer and a
native one of the same id fence each other.  The rules and their errors are
the core's (``transactions``); a refusal of the coordinator's own
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) becomes REDIRECTED or AGAIN,
which the client answers by finding the coordinator again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import LogstrandError, NotFoundError, Status
from ..positions import GROUP_RE, positions_log_of
from ..transactions import TXN_ID_RE, TxnError
from ..wire import TxnOp, TxnReply, TxnRequest
from ._errors import KafkaError

if TYPE_CHECKING:
    import trio

    from ..client import AsyncClient
    from ..net import Connection
    from ._txn_front import TxnFront

_log = logging.getLogger("logstrand.transactions")
#: Requests a node answers at once; past it, OVERLOADED.
TXN_REQUESTS_AT_ONCE = 1024
_STATUS: dict[int, Status] = {
    KafkaError.NOT_COORDINATOR: Status.REDIRECTED,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: Status.AGAIN,
    KafkaError.COORDINATOR_NOT_AVAILABLE: Status.AGAIN,
    KafkaError.INVALID_REQUEST: Status.INVALID_PARAM,
}


class NativeTxns:
    """Serves ``TxnRequest`` with the node's ``TxnFront`` (see the module docstring)."""

    def __init__(self, txns: TxnFront, client: AsyncClient, nursery: trio.Nursery) -> None:
        self.txns = txns
        self.client = client
        self._nursery = nursery
        self._at_once = 0

    async def handle(self, conn: Connection, msg: TxnRequest) -> None:
        # A request may read a positions log back or write markers: never in
        # the connection's receive loop.
        if self._at_once >= TXN_REQUESTS_AT_ONCE:
            await conn.reply(
                TxnReply(msg.request_id, int(Status.OVERLOADED), message="too many at once")
            )
            return
        self._at_once += 1
        self._nursery.start_soon(self._answer, conn, msg)

    async def _answer(self, conn: Connection, msg: TxnRequest) -> None:
        import trio

        try:
            try:
                reply = await self.request(msg)
            except LogstrandError as exc:
                reply = TxnReply(msg.request_id, int(exc.status), message=str(exc)[:1000])
            except Exception:
                # A bug here must not take the node down: say so, answer, go on.
                _log.exception("transaction %s: a request failed", msg.transactional_id)
                reply = TxnReply(
                    msg.request_id, int(Status.FAILED), message="the coordinator failed"
                )
            await conn.reply(reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the producer went away; its timeout ends what it left open
        finally:
            self._at_once -= 1

    async def request(self, msg: TxnRequest) -> TxnReply:
        """The answer to one request (see the module docstring)."""
        rid, txn_id, txns = msg.request_id, msg.transactional_id, self.txns
        if not TXN_ID_RE.fullmatch(txn_id):
            return _refused(rid, Status.INVALID_PARAM, f"not a transactional id: {txn_id!r:.60}")
        op = TxnOp(msg.op)
        pid, epoch = msg.producer_id, msg.producer_epoch
        if op == TxnOp.INIT:
            code, txn = await txns.init(txn_id, msg.timeout_ms, pid, epoch)
            if code or txn is None:
                return _verdict(rid, code)
            return TxnReply(
                rid, int(Status.OK), producer_id=txn.producer_id, producer_epoch=txn.producer_epoch
            )
        if op == TxnOp.ADD:
            why = await self._check_adds(msg)
            if why is not None:
                return _refused(rid, Status.INVALID_PARAM, why)
            code = await txns.take(txn_id)
            if not code:
                logs = set(msg.logs) | {positions_log_of(g) for g in msg.groups}
                code = await txns.add(txn_id, pid, epoch, logs, frozenset(msg.groups))
            return _verdict(rid, code)
        if op in (TxnOp.COMMIT, TxnOp.ABORT):
            return _verdict(rid, await txns.end(txn_id, pid, epoch, op == TxnOp.COMMIT))
        return _verdict(rid, await txns.abort(txn_id))

    async def _check_adds(self, msg: TxnRequest) -> str | None:
        """Why the logs and groups of an ADD cannot join (None: they can):
        a marker must be writable into every log a transaction added."""
        for group in msg.groups:
            if not GROUP_RE.fullmatch(group):
                return f"not a group name: {group!r:.60}"
        for log_id in msg.logs:
            try:
                await self.client.log_attributes(log_id)
            except NotFoundError:
                return f"log {log_id} does not exist"
        return None


def _verdict(rid: int, code: int) -> TxnReply:
    status = _STATUS.get(code)
    if status is not None:
        return TxnReply(rid, int(status), int(code), _name(code))
    return TxnReply(rid, int(Status.OK), int(code), _name(code))


def _name(code: int) -> str:
    for kind in (TxnError, KafkaError):
        try:
            return str(kind(code).name)
        except ValueError:
            pass
    return f"error {code}"


def _refused(rid: int, status: Status, why: str) -> TxnReply:
    return TxnReply(rid, int(status), message=why[:1000])

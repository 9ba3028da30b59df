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

from typing import TYPE_CHECKING

from ..errors import NotFoundError, Status
from ..kafka_errors import KafkaError
from ..positions import GROUP_RE
from ..transactions import TXN_ID_RE, TxnError
from ..wire import TxnOp, TxnReply, TxnRequest

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._txns import TxnFront

_STATUS: dict[int, Status] = {
    KafkaError.NOT_COORDINATOR: Status.REDIRECTED,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: Status.AGAIN,
    KafkaError.COORDINATOR_NOT_AVAILABLE: Status.AGAIN,
    KafkaError.INVALID_REQUEST: Status.INVALID_PARAM,
}


class NativeTxns:
    """Answers ``TxnRequest`` with the node's ``TxnFront`` (see the module
    docstring), in ``_answers``' tasks."""

    def __init__(self, txns: TxnFront, client: AsyncClient) -> None:
        self.txns = txns
        self.client = client

    async def request(self, msg: TxnRequest, peer: str = "") -> TxnReply:
        """The answer to one request (see the module docstring); ``peer``
        is not used (every request is the id's, whoever sends it)."""
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
            code = await txns.add(txn_id, pid, epoch, set(msg.logs), frozenset(msg.groups))
            return _verdict(rid, code)
        if op in (TxnOp.COMMIT, TxnOp.ABORT):
            commit = op == TxnOp.COMMIT
            return _verdict(rid, await txns.end(txn_id, pid, epoch, commit, msg.tag))
        return _verdict(rid, await txns.abort(txn_id))

    async def _check_adds(self, msg: TxnRequest) -> str | None:
        """Why the logs and groups of an ADD cannot join (None: they can):
        a marker must be writable into every log a transaction added."""
        for group in msg.groups:
            if not GROUP_RE.fullmatch(group):
                return f"not a group name: {group!r:.60}"
        for log_id in msg.logs:
            # Known logs are a lookup; the first unknown one reads the
            # configuration again once, and ends the check if still unknown.
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

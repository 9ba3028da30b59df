"""Consumer groups and transactional ids on the native protocol: what a
user may do to a group (``security.GroupGrant``) or with a transactional id
(``security.TxnGrant``), checked by the node's door after the grants on
logs (``_guard``).  Pure.

A ``TxnRequest`` needs ``write`` on its transactional id (an operator's
FORCE_ABORT, admin on every log).  Only two kinds of message touch groups:

- a member's heartbeat (``GroupHeartbeat``: ``client.subscribe``) needs
  ``read`` on its group;
- records appended to a positions log (``client.commit``, a reset, a
  delete: ``positions``; the positions a transaction holds for a group,
  ``Transaction.commit_positions``) need, for the group of each record's
  key, ``read`` (a position, a membership record or held positions) or
  ``delete`` (a tombstone).  A key that is no group's is refused: a positions log holds
  groups' records and nothing else.

Reading a positions log is a grant on logs (``read`` on ``positions``): it
shows every group's positions, as Kafka's offsets topic would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ProtocolError
from ..positions import group_of_key, group_of_txn_key
from ..records import INTERNAL_LOGS
from ..wire import Append, AppendMany, GroupHeartbeat, TxnOp, TxnRequest

if TYPE_CHECKING:
    from ..security._model import Grants, Principal

#: The largest batch a user may append to a positions log, decompressed: its
#: keys are read to check them, and positions are a few dozen bytes each.
POSITIONS_BATCH_BYTES_MAX = 4 * 1024 * 1024


def group_refusal(principal: Principal, grants: Grants, msg: Any) -> str | None:
    """Why ``principal`` may not send ``msg`` for the consumer groups it
    touches (None: it may; see the module docstring)."""
    if principal.is_node:
        return None
    user = principal.name
    kind = type(msg)
    if kind is GroupHeartbeat:
        return _may_group(user, grants, "read", msg.group)
    if kind is TxnRequest:
        return _may_txn(user, grants, msg)
    entries: list[tuple[int, Any]]
    if kind is Append:
        entries = [(msg.log_id, msg.batch)]
    elif kind is AppendMany:
        entries = list(zip(msg.log_ids, msg.batches, strict=True))
    else:
        return None
    for log_id, batch in entries:
        if log_id not in INTERNAL_LOGS:
            continue
        if batch.raw_len > POSITIONS_BATCH_BYTES_MAX:
            return f"a batch of {batch.raw_len} bytes for a positions log (at most 4 MiB)"
        try:
            keys, payloads = batch.keys_payloads()
        except ProtocolError as exc:
            return f"a batch for a positions log that does not decode: {exc}"
        for key, payload in zip(keys, payloads, strict=True):
            group = group_of_key(key) or group_of_txn_key(key)
            if group is None:
                return f"user {user} may append to positions logs only records of groups"
            why = _may_group(user, grants, "read" if payload is not None else "delete", group)
            if why is not None:
                return why
    return None


def _may_group(user: str, grants: Grants, op: str, group: str) -> str | None:
    if grants.may_group(user, op, group):
        return None
    return (
        f"user {user} may not {op} group {group} "
        f"(logstrand acl grant {user} --group {group} --ops {op})"
    )


def _may_txn(user: str, grants: Grants, msg: TxnRequest) -> str | None:
    txn_id = msg.transactional_id
    if msg.op == TxnOp.FORCE_ABORT:
        if grants.may(user, "admin", None):
            return None
        return f"user {user} may not abort others' transactions: it needs admin on all logs"
    if grants.may_txn(user, "write", txn_id):
        return None
    return (
        f"user {user} may not write transactional id {txn_id} "
        f"(logstrand acl grant {user} --transactional-id {txn_id} --ops write)"
    )

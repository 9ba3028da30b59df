"""Principals, grants and what each message needs: pure, no I/O.

A connection to a node acts for one principal, fixed at the handshake:

* ``node``: another node of the cluster, authenticated by its certificate
  (the node id is in the certificate).  Only nodes may send the messages
  that carry copies and seals between nodes (``NODE_ONLY``).
* ``user``: a client that presented a token (over TLS) or a client
  certificate; it may do what its grants allow, per log and operation.
* ``trusted``: everyone, on a node that runs without TLS.  Such a cluster
  trusts its network (see docs/security.md).

Operations: ``read`` (read streams, find-time, log state, the sequencer's
state), ``append``, ``trim`` and ``admin`` (compaction, node status).

Consumer groups are a resource of grants of their own (``GroupGrant``), as
Kafka's GROUP resource is: ``read`` (be a member, commit), ``describe``
(see its members and positions; any grant on a group implies it, as in
Kafka) and ``delete`` (remove its positions), on one group, on groups by a
prefix (``billing-*``) or on every group (``*``).  A user with ``admin`` on
every log may do everything to every group.  (The node checks them on the
native protocol: ``storage._group_access``.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import TYPE_CHECKING, Any

import attrs

from .. import records
from ..errors import InvalidArgumentError
from ..records import GROUP_OPS, GROUP_RE, INTERNAL_LOGS, LOG_ID_MAX, POSITIONS_LOGS
from ..records import OPS as OPS
from ..transactions import TXN_ID_RE
from ..wire import ACCESS

if TYPE_CHECKING:
    from collections.abc import Callable

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
TOKEN_PREFIX = "lst_"

#: Messages that only a node of the cluster may send: they carry copies,
#: seals and release pointers between nodes (declared with each message,
#: ``wire.ACCESS``).
NODE_ONLY: frozenset[type] = frozenset(t for t, a in ACCESS.items() if a == "node")

#: For each message a client may send: the operation it needs.  Messages of a
#: read stream after its start (credit, stop) need nothing more: the stream
#: was checked when it started.
_OPS: dict[type, str | None] = {
    t: None if a == "any" else a for t, a in ACCESS.items() if a != "node"
}


@attrs.frozen
class Grant:
    """``user`` may do ``ops`` on logs ``first..last``."""

    user: str
    first: int
    last: int
    ops: frozenset[str]

    def covers(self, op: str, log_id: int | None) -> bool:
        if op not in self.ops:
            return False
        if log_id is None or self.first <= log_id <= self.last:
            return True
        # "all" (every user log) covers the internal logs too, and a grant on
        # the first positions log (all there was before there were several)
        # covers every one of them.
        if log_id not in INTERNAL_LOGS:
            return False
        return (self.first, self.last) in ((1, LOG_ID_MAX), (POSITIONS_LOGS[0], POSITIONS_LOGS[0]))

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "first": self.first, "last": self.last, "ops": sorted(self.ops)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Grant:
        return cls(doc["user"], int(doc["first"]), int(doc["last"]), frozenset(doc["ops"]))


@attrs.frozen
class TopicGrant:
    """``user`` may do ``ops`` on the logs of the ranges ``pattern`` names:
    one name, or the names that start with a prefix (``PREFIX*``).  Unlike
    a ``Grant`` it holds by name, so it covers a topic made or grown after
    it (Kafka's literal and prefixed ACLs on topics)."""

    user: str
    pattern: str
    ops: frozenset[str]

    def names(self, name: str | None) -> bool:
        if name is None:
            return False
        if self.pattern.endswith("*"):
            return name.startswith(self.pattern[:-1])
        return name == self.pattern

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "topic": self.pattern, "ops": sorted(self.ops)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TopicGrant:
        return cls(doc["user"], doc["topic"], frozenset(doc["ops"]))


@attrs.frozen
class GroupGrant:
    """``user`` may do ``ops`` on the groups ``pattern`` names: one group,
    the groups whose names start with a prefix (``PREFIX*``), or every
    group (``*``)."""

    user: str
    pattern: str
    ops: frozenset[str]

    def names(self, group: str) -> bool:
        if self.pattern.endswith("*"):
            return group.startswith(self.pattern[:-1])
        return group == self.pattern

    def covers(self, op: str, group: str) -> bool:
        # Kafka's implied operations: any grant on a group lets its holder
        # describe it.
        return (op in self.ops or (op == "describe" and bool(self.ops))) and self.names(group)

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "group": self.pattern, "ops": sorted(self.ops)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> GroupGrant:
        return cls(doc["user"], doc["group"], frozenset(doc["ops"]))


@attrs.frozen
class TxnGrant:
    """``user`` may do ``ops`` (``TXN_OPS``) on the transactional ids
    ``pattern`` names: one id, those that start with a prefix (``PREFIX*``),
    or every id (``*``)."""

    user: str
    pattern: str
    ops: frozenset[str]

    def covers(self, op: str, txn_id: str) -> bool:
        if self.pattern.endswith("*"):
            named = txn_id.startswith(self.pattern[:-1])
        else:
            named = txn_id == self.pattern
        # Kafka's implied operations: WRITE lets its holder DESCRIBE too.
        return named and (op in self.ops or (op == "describe" and "write" in self.ops))

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "transactional_id": self.pattern, "ops": sorted(self.ops)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TxnGrant:
        return cls(doc["user"], doc["transactional_id"], frozenset(doc["ops"]))


@attrs.frozen
class Grants:
    """Every grant of the cluster: on logs, groups, topics and transactional
    ids (the epoch store's ``security`` document)."""

    logs: tuple[Grant, ...] = ()
    groups: tuple[GroupGrant, ...] = ()
    topics: tuple[TopicGrant, ...] = ()
    txns: tuple[TxnGrant, ...] = ()

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Grants:
        return cls(
            tuple(Grant.from_json(g) for g in doc.get("grants", ())),
            tuple(GroupGrant.from_json(g) for g in doc.get("group_grants", ())),
            tuple(TopicGrant.from_json(g) for g in doc.get("topic_grants", ())),
            tuple(TxnGrant.from_json(g) for g in doc.get("txn_grants", ())),
        )

    def may_txn(self, user: str, op: str, txn_id: str) -> bool:
        """Whether ``user`` may ``op`` (``TXN_OPS``) on transactional id
        ``txn_id``: a grant on it, or admin on every log."""
        return any(g.user == user and g.covers(op, txn_id) for g in self.txns) or self.may(
            user, "admin", None
        )

    def may(self, user: str, op: str, log_id: int | None, name: str | None = None) -> bool:
        """Whether ``user`` may ``op`` on ``log_id`` (None: on every user log),
        which is in the range named ``name`` (None: in no named range)."""
        if log_id is None:
            return any(
                g.user == user and op in g.ops and (g.first, g.last) == (1, LOG_ID_MAX)
                for g in self.logs
            )
        return any(g.user == user and g.covers(op, log_id) for g in self.logs) or any(
            g.user == user and op in g.ops and g.names(name) for g in self.topics
        )

    def may_somewhere(self, user: str, op: str) -> bool:
        """Whether ``user`` may ``op`` on at least one log."""
        return any(g.user == user and op in g.ops for g in self.logs) or any(
            g.user == user and op in g.ops for g in self.topics
        )

    def may_group(self, user: str, op: str, group: str) -> bool:
        """Whether ``user`` may ``op`` (``GROUP_OPS``) on ``group``: a grant
        on it, or admin on every log."""
        return any(g.user == user and g.covers(op, group) for g in self.groups) or self.may(
            user, "admin", None
        )


NO_GRANTS = Grants()


@attrs.frozen
class Principal:
    kind: str  # "node", "user" or "trusted"
    name: str
    node_id: int | None = None

    @property
    def is_node(self) -> bool:
        return self.kind in ("node", "trusted")

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


TRUSTED = Principal("trusted", "anyone")


def node_principal(node_id: int) -> Principal:
    return Principal("node", f"node{node_id}", node_id)


def user_principal(name: str) -> Principal:
    return Principal("user", name)


def required(msg: Any) -> tuple[str, int | None] | None:
    """The operation ``msg`` needs and the log it is on; None when it needs none.

    Raises:
        KeyError: the message is not one a client may send (node-only or a reply).
    """
    op = _OPS[type(msg)]
    if op is None:
        return None
    if op == "append" and _marks(msg):
        # A transaction's marker decides producers' records for every reader
        # of the log: a coordinator's to write (a node's Kafka front), or an
        # administrator's, never an appender's.
        op = "admin"
    return op, getattr(msg, "log_id", None)


def _marks(msg: Any) -> bool:
    """Whether an append carries a transaction's marker (a CONTROL batch)."""
    batches = getattr(msg, "batches", None) or (getattr(msg, "batch", None),)
    return any(b is not None and b.flags0 & records.CONTROL for b in batches)


def _no_name(log_id: int) -> str | None:
    return None


def refusal(
    principal: Principal,
    grants: Grants,
    msg: Any,
    name_of: Callable[[int], str | None] = _no_name,
) -> str | None:
    """Why ``principal`` may not send ``msg`` (None: it may).  ``name_of``
    gives the name of the range a log is in, for grants by topic name."""
    if principal.is_node:
        return None
    kind = type(msg)
    if kind in NODE_ONLY:
        return f"{kind.__name__} is accepted only from a node of the cluster"
    if kind not in _OPS:
        return f"{kind.__name__} is not a request"
    need = required(msg)
    if need is None:
        return None
    op, log_id = need
    mine = [g for g in grants.logs if g.user == principal.name]
    by_name = [g for g in grants.topics if g.user == principal.name and op in g.ops]
    # A request on many logs (``GetTails``) needs the operation on each.
    logs: tuple[int | None, ...] = getattr(msg, "log_ids", None) or (log_id,)
    for log in logs:
        if any(g.covers(op, log) for g in mine):
            continue
        if log is None or not by_name or not any(g.names(name_of(log)) for g in by_name):
            where = f" on log {log}" if log is not None else ""
            return f"{principal} may not {op}{where}"
    return None


# -- tokens ---------------------------------------------------------------------


def new_token() -> str:
    """A fresh random token (256 bits), shown once to whoever creates a user."""
    return TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def user_of_token(users: dict[str, Any], token: str) -> str | None:
    """The name of the user (of the epoch store's ``users``) whose token this
    is, or None; each hash compared in constant time."""
    digest = hash_token(token)
    for name, user in users.items():
        if hmac.compare_digest(digest, user["sha256"]):
            return name
    return None


def hash_token(token: str) -> str:
    """What the epoch store keeps of a token: its SHA-256, hex.  The token has
    256 random bits, so a hash without salt or stretching is enough."""
    return hashlib.sha256(token.encode()).hexdigest()


# -- parsing what operators type ---------------------------------------------------


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InvalidArgumentError(
            f"bad user name {name!r}: 1-64 of letters, digits and _.@- (not first)"
        )
    return name


def parse_ops(text: str) -> frozenset[str]:
    """``read,append`` or ``all`` → the set of operations on logs."""
    return _parse_ops(text, OPS, "operations")


def parse_group_ops(text: str) -> frozenset[str]:
    """``read,describe`` or ``all`` → the operations on a group."""
    return _parse_ops(text, GROUP_OPS, "operations on a group")


def _parse_ops(text: str, known: tuple[str, ...], what: str) -> frozenset[str]:
    if text.strip() == "all":
        return frozenset(known)
    ops = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = ops - set(known)
    if not ops or unknown:
        bad = ", ".join(sorted(unknown)) or "none"
        raise InvalidArgumentError(f"unknown {what} {bad}; known: {', '.join(known)}, all")
    return ops


def parse_txn_ops(text: str) -> frozenset[str]:
    """``write``, ``describe`` or ``all`` → the operations on a transactional id."""
    return _parse_ops(text, records.TXN_OPS, "operations on a transactional id")


def parse_txn_pattern(text: str) -> str:
    """A transactional id, ``PREFIX*`` or ``*`` (every id)."""
    name = text[:-1] if text.endswith("*") else text
    if text == "*" or TXN_ID_RE.fullmatch(name):
        return text
    raise InvalidArgumentError(
        f"bad transactional id {text!r}: an id (printable ASCII, no spaces, 1-249), PREFIX* or *"
    )


def parse_group_pattern(text: str) -> str:
    """A group name, ``PREFIX*`` (every group whose name starts so) or ``*``
    (every group)."""
    name = text[:-1] if text.endswith("*") else text
    if text == "*" or GROUP_RE.fullmatch(name):
        return text
    raise InvalidArgumentError(
        f"bad group {text!r}: a group name, PREFIX* or * (names are 1-128 of letters, "
        "digits and _.@:-, not first)"
    )


def parse_log_range(text: str) -> tuple[int, int]:
    """``5``, ``1..100``, ``all`` (every log, the internal ones too) or
    ``positions`` (the internal logs of consumer positions) → (first, last)."""
    return records.parse_log_range(
        text, {"all": (1, LOG_ID_MAX), "positions": (POSITIONS_LOGS[0], POSITIONS_LOGS[-1])}
    )

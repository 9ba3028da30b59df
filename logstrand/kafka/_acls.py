"""Kafka's ACL APIs as logstrand grants: DescribeAcls, CreateAcls, DeleteAcls.

A grant lets a user do operations on a range of logs (docs/security.md); an
ACL lets a principal do an operation on a resource.  They map where both
have a meaning:

* the resource is a **topic** by its literal name or a prefix (PREFIXED): a
  grant by topic name, which covers the topic's logs whatever ranges they
  are in, and a topic made later (so an ACL may come before its topic, as
  in Kafka); or ``*`` (every log, a grant on ``all``); the cluster resource
  is ``all`` too;
* or a **group** (a group grant): a literal name (``*``: every group) or a
  prefix (PREFIXED: ``PREFIX*``); READ, DESCRIBE and DELETE are the group
  operations of the same names, ALL is the three;
* or a **transactional id** (a grant on transactional ids), named as a
  group is; WRITE and DESCRIBE are ``write`` and ``describe``, ALL both;
* the principal is ``User:NAME``, a logstrand user; the host ``*``;
* on a topic, READ and DESCRIBE are ``read``, WRITE is ``append``, DELETE is
  ``trim``, ALTER, CREATE and ALTER_CONFIGS are ``admin``, ALL is all four;
* only ALLOW: grants allow, nothing denies.

What has no counterpart is refused, naming why: DENY, other hosts.
DescribeAcls lists the grants by topic name, those on the range of a topic
of one range (``logstrand acl grant USER orders``), on everything, on
groups or on transactional ids; a grant on another range of logs has no Kafka
name and is left out (``logstrand acl list`` shows it).
A filter's MATCH pattern type is taken as ANY.  The APIs need ``admin`` on
every log, as topic administration does.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs

from ..epochstore._model import check_range_name
from ..errors import LogstrandError
from ..kafka_errors import KafkaError
from ..records import GROUP_OPS, LOG_ID_MAX, OPS, TXN_OPS
from ..security import check_name, parse_group_pattern, parse_txn_pattern

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._group_apis import GroupFront
    from ._protocol import Request

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
ANY_TYPE, ANY_OP, ANY_PERMISSION, ANY_PATTERN, MATCH = 1, 1, 1, 1, 2
LITERAL, PREFIXED, ALLOW, ALL = 3, 4, 3, 2
#: Kafka operation -> the logstrand operations it is, on a topic and on a group.
_OPS = {2: set(OPS), 3: {"read"}, 8: {"read"}, 4: {"append"}, 6: {"trim"}, 7: {"admin"}}
_OPS |= {5: {"admin"}, 11: {"admin"}}
_GROUP_OPS = {2: set(GROUP_OPS), 3: {"read"}, 8: {"describe"}, 6: {"delete"}}
#: logstrand operation -> the Kafka operation shown.
_SHOWN = {"read": 3, "append": 4, "trim": 6, "admin": 7}
_GROUP_SHOWN = {"read": 3, "describe": 8, "delete": 6}
_TXN_OPS = {2: set(TXN_OPS), 4: {"write"}, 8: {"describe"}}
_TXN_SHOWN = {"write": 4, "describe": 8}
INVALID = KafkaError.INVALID_REQUEST


#: What an ACL is granted on: logs (first, last), or ("group" or
#: "topic", a name or ``PREFIX*``).
On = tuple[int, int] | tuple[str, str]


def _grant(store: Any, *, user: str, on: On, ops: frozenset[str]) -> None:
    # A Kafka ACL names any principal, a user of SCRAM credentials or not
    # yet: the grant waits for ``logstrand users add``.
    if on[0] == "group":
        store.grant_group(user, on[1], ops, user_to_come=True)
    elif on[0] == "transactional id":
        store.grant_txn(user, on[1], ops, user_to_come=True)
    elif on[0] == "topic":
        store.grant_topic(user, on[1], ops, user_to_come=True)
    else:
        store.grant(user, *on, ops, user_to_come=True)


def _revoke(store: Any, *, grant: dict[str, Any], op: str) -> None:
    if "group" in grant:
        store.revoke_group(grant["user"], grant["group"], frozenset({op}))
    elif "transactional_id" in grant:
        store.revoke_txn(grant["user"], grant["transactional_id"], frozenset({op}))
    elif "topic" in grant:
        store.revoke_topic(grant["user"], grant["topic"], frozenset({op}))
    else:
        store.revoke(grant["user"], grant["first"], grant["last"], frozenset({op}))


def _named_acls(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every grant by group or topic name, one ACL per operation."""
    out = []
    named = [("group", GROUP, g) for g in doc.get("group_grants", ())]
    named += [("topic", TOPIC, g) for g in doc.get("topic_grants", ())]
    named += [("transactional_id", TRANSACTIONAL_ID, g) for g in doc.get("txn_grants", ())]
    shown = {GROUP: _GROUP_SHOWN, TRANSACTIONAL_ID: _TXN_SHOWN}
    for field, kind, g in named:
        pattern = g[field]
        prefixed = pattern.endswith("*") and pattern != "*"
        for op in sorted(g["ops"]):
            out.append(
                {
                    "resource_type": kind,
                    "resource_name": pattern[:-1] if prefixed else pattern,
                    "pattern_type": PREFIXED if prefixed else LITERAL,
                    "principal": f"User:{g['user']}",
                    "host": "*",
                    "operation": shown.get(kind, _SHOWN)[op],
                    "permission_type": ALLOW,
                    "grant": g,
                    "op": op,
                }
            )
    return out


class AclApis:
    """The three ACL APIs (see the module docstring)."""

    def __init__(self, front: GroupFront) -> None:
        self.front = front

    async def _security(self) -> dict[str, Any]:
        doc: dict[str, Any] = await self.front.client.view.astore.run(lambda s: s.security())
        return doc

    def _ranges(self) -> dict[tuple[int, int], str]:
        # A grant on a range is shown under the topic's name when the topic
        # is that range alone: one that grew is not all of it.
        out = {
            (r.first, r.parts[0].last): n
            for n, r in self.front.topics().items()
            if len(r.parts) == 1
        }
        out[(1, LOG_ID_MAX)] = "*"
        return out

    def _acls(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """Every grant that has a Kafka name, one ACL per operation."""
        names = self._ranges()
        out = []
        for g in doc["grants"]:
            name = names.get((g["first"], g["last"]))
            if name is None:
                continue
            for op in sorted(g["ops"]):
                out.append(
                    {
                        "resource_type": TOPIC,
                        "resource_name": name,
                        "pattern_type": LITERAL,
                        "principal": f"User:{g['user']}",
                        "host": "*",
                        "operation": _SHOWN[op],
                        "permission_type": ALLOW,
                        "grant": g,
                        "op": op,
                    }
                )
        return out + _named_acls(doc)

    @staticmethod
    def _matches(acl: dict[str, Any], f: dict[str, Any]) -> bool:
        """Whether an ACL is one a DescribeAcls request or a DeleteAcls filter names."""
        return (
            f["resource_type_filter"] in (ANY_TYPE, acl["resource_type"])
            and f["resource_name_filter"] in (None, acl["resource_name"])
            and f.get("pattern_type_filter", LITERAL) in (ANY_PATTERN, MATCH, acl["pattern_type"])
            and f["principal_filter"] in (None, acl["principal"])
            and f["host_filter"] in (None, "*")
            and f["operation"] in (ANY_OP, ALL, acl["operation"])
            and f["permission_type"] in (ANY_PERMISSION, ALLOW)
        )

    async def describe(self, request: Request) -> dict[str, Any]:
        try:
            acls = self._acls(await self._security())
        except LogstrandError as exc:
            return {
                "error_code": KafkaError.UNKNOWN_SERVER_ERROR,
                "error_message": str(exc),
                "resources": [],
            }
        chosen = [a for a in acls if self._matches(a, request.body)]
        resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for a in chosen:
            where = (a["resource_type"], a["resource_name"], a["pattern_type"])
            resources.setdefault(where, []).append(
                {k: a[k] for k in ("principal", "host", "operation", "permission_type")}
            )
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "resources": [
                {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                for (t, n, p), acls in sorted(resources.items())
            ],
        }

    def _grant_of(self, c: dict[str, Any]) -> tuple[str, On, set[str]] | str:
        """(user, what it is on, ops) an ACL creation asks for, or why it
        cannot be."""
        if c["permission_type"] != ALLOW:
            return "only ALLOW: logstrand's grants allow, nothing denies"
        if c["host"] != "*":
            return "only host *: grants are not per host"
        principal = c["principal"]
        if not principal.startswith("User:"):
            return f"not a principal logstrand can have: {principal!r} (User:NAME)"
        try:
            check_name(principal[5:])
        except LogstrandError as exc:
            return str(exc)
        user, pattern = principal[5:], c.get("resource_pattern_type", LITERAL)
        if c["resource_type"] == GROUP:
            return _named_grant_of(user, c["resource_name"], pattern, c["operation"], _GROUP)
        if c["resource_type"] == TRANSACTIONAL_ID:
            return _named_grant_of(user, c["resource_name"], pattern, c["operation"], _TXN)
        if pattern not in (LITERAL, PREFIXED):
            return "a topic ACL is LITERAL or PREFIXED"
        ops = _OPS.get(c["operation"])
        if ops is None:
            return f"operation {c['operation']} has no logstrand counterpart"
        if c["resource_type"] == CLUSTER:
            return user, (1, LOG_ID_MAX), ops
        if c["resource_type"] != TOPIC:
            return "only topics, groups, transactional ids and the cluster"
        name = c["resource_name"]
        if name == "*" and pattern == LITERAL:
            return user, (1, LOG_ID_MAX), ops
        try:
            check_range_name(name)
        except LogstrandError as exc:
            return str(exc)
        return user, ("topic", name + "*" if pattern == PREFIXED else name), ops

    async def create(self, request: Request) -> dict[str, Any]:
        results = []
        for c in request.body["creations"]:
            want = self._grant_of(c)
            if isinstance(want, str):
                results.append({"error_code": INVALID, "error_message": want})
                continue
            user, on, ops = want
            try:
                await self.front.client.view.astore.run(
                    functools.partial(_grant, user=user, on=on, ops=frozenset(ops))
                )
            except LogstrandError as exc:
                results.append({"error_code": INVALID, "error_message": str(exc)})
                continue
            results.append({"error_code": 0, "error_message": None})
        self.front.auth.forget()
        return {"throttle_time_ms": 0, "results": results}

    async def delete(self, request: Request) -> dict[str, Any]:
        acls = self._acls(await self._security())
        out = []
        for f in request.body["filters"]:
            matched = [a for a in acls if self._matches(a, f)]
            for a in matched:
                g = a["grant"]
                await self.front.client.view.astore.run(
                    functools.partial(_revoke, grant=g, op=a["op"])
                )
            out.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "matching_acls": [
                        {
                            "error_code": 0,
                            "error_message": None,
                            **{k: v for k, v in a.items() if k not in ("grant", "op")},
                        }
                        for a in matched
                    ],
                }
            )
        self.front.auth.forget()
        return {"throttle_time_ms": 0, "filter_results": out}


@attrs.frozen
class _Named:
    """A resource named as a group is (a name, PREFIXED, or ``*``): its
    operations, how its names are checked, and what it is called."""

    ops: dict[int, set[str]]
    parse: Callable[[str], str]
    kind: str
    listed: str


_GROUP = _Named(_GROUP_OPS, parse_group_pattern, "group", "read, describe, delete")
_TXN = _Named(_TXN_OPS, parse_txn_pattern, "transactional id", "write, describe")


def _named_grant_of(
    user: str, name: str, pattern: int, operation: int, named: _Named
) -> tuple[str, On, set[str]] | str:
    """The grant an ACL on a group or a transactional id is, or why none."""
    ops = named.ops.get(operation)
    if ops is None:
        return f"operation {operation} has no counterpart on a {named.kind} ({named.listed})"
    if pattern not in (LITERAL, PREFIXED):
        return f"a {named.kind} ACL is LITERAL or PREFIXED"
    try:
        on = named.parse(name + "*" if pattern == PREFIXED and name != "*" else name)
    except LogstrandError as exc:
        return str(exc)
    return user, (named.kind, on), ops

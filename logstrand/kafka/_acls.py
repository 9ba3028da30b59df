"""Kafka's ACL APIs as logstrand grants: DescribeAcls, CreateAcls, DeleteAcls.

A grant lets a user do operations on a range of logs (docs/security.md); an
ACL lets a principal do an operation on a resource.  They map where both
have a meaning:

* the resource is a **topic** by its literal name (its range of logs), or
  ``*`` (every log, a grant on ``all``); the cluster resource is ``all`` too;
* or a **group** (a group grant): a literal name (``*``: every group) or a
  prefix (PREFIXED: ``PREFIX*``); READ, DESCRIBE and DELETE are the group
  operations of the same names, ALL is the three;
* the principal is ``User:NAME``, a logstrand user; the host ``*``;
* on a topic, READ and DESCRIBE are ``read``, WRITE is ``append``, DELETE is
  ``trim``, ALTER, CREATE and ALTER_CONFIGS are ``admin``, ALL is all four;
* only ALLOW: grants allow, nothing denies.

What has no counterpart is refused, naming why: DENY, prefixed topics,
transactional ids, other hosts.  DescribeAcls lists the grants that are on
a topic's range, on everything, or on groups; a grant on another range of
logs has no Kafka name and is left out (``logstrand acl list`` shows it).
A filter's MATCH pattern type is taken as ANY.  The APIs need ``admin`` on
every log, as topic administration does.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..errors import LogstrandError
from ..records import GROUP_OPS, LOG_ID_MAX, OPS
from ..security import check_name, parse_group_pattern
from ._errors import KafkaError

if TYPE_CHECKING:
    from ._groups import GroupFront
    from ._protocol import Request

TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY_TYPE, ANY_OP, ANY_PERMISSION, ANY_PATTERN, MATCH = 1, 1, 1, 1, 2
LITERAL, PREFIXED, ALLOW, ALL = 3, 4, 3, 2
#: Kafka operation -> the logstrand operations it is, on a topic and on a group.
_OPS = {2: set(OPS), 3: {"read"}, 8: {"read"}, 4: {"append"}, 6: {"trim"}, 7: {"admin"}}
_OPS |= {5: {"admin"}, 11: {"admin"}}
_GROUP_OPS = {2: set(GROUP_OPS), 3: {"read"}, 8: {"describe"}, 6: {"delete"}}
#: logstrand operation -> the Kafka operation shown.
_SHOWN = {"read": 3, "append": 4, "trim": 6, "admin": 7}
_GROUP_SHOWN = {"read": 3, "describe": 8, "delete": 6}
INVALID = KafkaError.INVALID_REQUEST


def _grant(store: Any, *, user: str, on: tuple[int, int] | str, ops: frozenset[str]) -> None:
    # A Kafka ACL names any principal, a user of SCRAM credentials or not
    # yet: the grant waits for ``logstrand users add``.
    if isinstance(on, str):
        store.grant_group(user, on, ops, user_to_come=True)
    else:
        store.grant(user, *on, ops, user_to_come=True)


def _revoke(store: Any, *, grant: dict[str, Any], op: str) -> None:
    if "group" in grant:
        store.revoke_group(grant["user"], grant["group"], frozenset({op}))
    else:
        store.revoke(grant["user"], grant["first"], grant["last"], frozenset({op}))


def _group_acls(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every group grant, one ACL per operation."""
    out = []
    for g in doc.get("group_grants", ()):
        prefixed = g["group"].endswith("*") and g["group"] != "*"
        for op in sorted(g["ops"]):
            out.append(
                {
                    "resource_type": GROUP,
                    "resource_name": g["group"][:-1] if prefixed else g["group"],
                    "pattern_type": PREFIXED if prefixed else LITERAL,
                    "principal": f"User:{g['user']}",
                    "host": "*",
                    "operation": _GROUP_SHOWN[op],
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
        out = {(r.first, r.last): n for n, r in self.front.topics().items()}
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
        return out + _group_acls(doc)

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

    def _grant_of(self, c: dict[str, Any]) -> tuple[str, tuple[int, int] | str, set[str]] | str:
        """(user, logs (first, last) or a group pattern, ops) an ACL creation
        asks for, or why it cannot be."""
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
            return self._group_grant_of(user, c["resource_name"], pattern, c["operation"])
        if pattern != LITERAL:
            return "only literal topic names (a topic, or *); groups may be PREFIXED"
        ops = _OPS.get(c["operation"])
        if ops is None:
            return f"operation {c['operation']} has no logstrand counterpart"
        if c["resource_type"] == CLUSTER:
            return user, (1, LOG_ID_MAX), ops
        if c["resource_type"] != TOPIC:
            return "only topics, groups and the cluster: others have no counterpart"
        if c["resource_name"] == "*":
            return user, (1, LOG_ID_MAX), ops
        r = self.front.topics().get(c["resource_name"])
        if r is None:
            return f"no topic {c['resource_name']!r}"
        return user, (r.first, r.last), ops

    @staticmethod
    def _group_grant_of(
        user: str, name: str, pattern: int, operation: int
    ) -> tuple[str, str, set[str]] | str:
        ops = _GROUP_OPS.get(operation)
        if ops is None:
            return f"operation {operation} has no counterpart on a group (read, describe, delete)"
        if pattern not in (LITERAL, PREFIXED):
            return "a group ACL is LITERAL or PREFIXED"
        try:
            on = parse_group_pattern(name + "*" if pattern == PREFIXED and name != "*" else name)
        except LogstrandError as exc:
            return str(exc)
        return user, on, ops

    async def create(self, request: Request) -> dict[str, Any]:
        named = self.front.topics()
        if any(c["resource_name"] not in named for c in request.body["creations"]):
            await self.front.data.rereads.reread()  # a topic made since the last read
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

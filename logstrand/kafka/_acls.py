"""Kafka's ACL APIs as logstrand grants: DescribeAcls, CreateAcls, DeleteAcls.

A grant lets a user do operations on a range of logs (docs/security.md); an
ACL lets a principal do an operation on a resource.  They map where both
have a meaning:

* the resource is a **topic** by its literal name (its range of logs), or
  ``*`` (every log, a grant on ``all``); the cluster resource is ``all`` too;
* the principal is ``User:NAME``, a logstrand user; the host ``*``;
* READ and DESCRIBE are ``read``, WRITE is ``append``, DELETE is ``trim``,
  ALTER, CREATE and ALTER_CONFIGS are ``admin``, ALL is all four;
* only ALLOW: grants allow, nothing denies.

What has no counterpart is refused, naming why: DENY, prefixed patterns,
groups, transactional ids, other hosts.  DescribeAcls lists the grants that
are on a topic's range or on everything; a grant on another range of logs
has no Kafka name and is left out (``logstrand acl list`` shows it).  The
APIs need ``admin`` on every log, as topic administration does.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..errors import LogstrandError
from ..records import LOG_ID_MAX, OPS
from ._errors import KafkaError

if TYPE_CHECKING:
    from ._groups import GroupFront
    from ._protocol import Request

TOPIC, CLUSTER = 2, 4
ANY_TYPE, ANY_OP, ANY_PERMISSION, ANY_PATTERN, MATCH = 1, 1, 1, 1, 2
LITERAL, ALLOW, ALL = 3, 3, 2
#: Kafka operation -> the logstrand operations it is.
_OPS = {2: set(OPS), 3: {"read"}, 8: {"read"}, 4: {"append"}, 6: {"trim"}, 7: {"admin"}}
_OPS |= {5: {"admin"}, 11: {"admin"}}
#: logstrand operation -> the Kafka operation shown.
_SHOWN = {"read": 3, "append": 4, "trim": 6, "admin": 7}
INVALID = KafkaError.INVALID_REQUEST


def _grant(store: Any, *, user: str, first: int, last: int, ops: frozenset[str]) -> None:
    store.grant(user, first, last, ops)


def _revoke(store: Any, *, grant: dict[str, Any], op: str) -> None:
    store.revoke(grant["user"], grant["first"], grant["last"], frozenset({op}))


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
        return out

    @staticmethod
    def _matches(acl: dict[str, Any], f: dict[str, Any]) -> bool:
        """Whether an ACL is one a DescribeAcls request or a DeleteAcls filter names."""
        return (
            f["resource_type_filter"] in (ANY_TYPE, acl["resource_type"])
            and f["resource_name_filter"] in (None, acl["resource_name"])
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
        resources: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for a in chosen:
            resources.setdefault((a["resource_type"], a["resource_name"]), []).append(
                {k: a[k] for k in ("principal", "host", "operation", "permission_type")}
            )
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "resources": [
                {"resource_type": t, "resource_name": n, "pattern_type": LITERAL, "acls": acls}
                for (t, n), acls in sorted(resources.items())
            ],
        }

    def _grant_of(
        self, c: dict[str, Any], users: dict[str, Any]
    ) -> tuple[str, int, int, set[str]] | str:
        """(user, first, last, ops) an ACL creation asks for, or why it cannot be."""
        if c["permission_type"] != ALLOW:
            return "only ALLOW: logstrand's grants allow, nothing denies"
        if c.get("resource_pattern_type", LITERAL) != LITERAL:
            return "only literal resource names (a topic, or *)"
        if c["host"] != "*":
            return "only host *: grants are not per host"
        principal = c["principal"]
        if not principal.startswith("User:") or principal[5:] not in users:
            return f"no logstrand user {principal!r} (logstrand users add)"
        ops = _OPS.get(c["operation"])
        if ops is None:
            return f"operation {c['operation']} has no logstrand counterpart"
        if c["resource_type"] == CLUSTER:
            return principal[5:], 1, LOG_ID_MAX, ops
        if c["resource_type"] != TOPIC:
            return "only topics and the cluster: group ACLs have no counterpart"
        if c["resource_name"] == "*":
            return principal[5:], 1, LOG_ID_MAX, ops
        r = self.front.topics().get(c["resource_name"])
        if r is None:
            return f"no topic {c['resource_name']!r}"
        return principal[5:], r.first, r.last, ops

    async def create(self, request: Request) -> dict[str, Any]:
        users = (await self._security())["users"]
        named = self.front.topics()
        if any(c["resource_name"] not in named for c in request.body["creations"]):
            await self.front.data.rereads.reread()  # a topic made since the last read
        results = []
        for c in request.body["creations"]:
            want = self._grant_of(c, users)
            if isinstance(want, str):
                results.append({"error_code": INVALID, "error_message": want})
                continue
            user, first, last, ops = want
            try:
                await self.front.client.view.astore.run(
                    functools.partial(_grant, user=user, first=first, last=last, ops=frozenset(ops))
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

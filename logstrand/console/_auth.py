"""The console in secure mode: every API request names its user by a token
(``Authorization: Bearer lst_...``; ``?token=`` only on the live tail, whose
EventSource cannot set a header: a token in a URL ends up in histories and
logs, so no other route takes one there), and may do only what the user's
grants allow, as on the native protocol (docs/security.md):

- a route on one log (``/api/logs/{log}...``) needs its operation (read,
  trim) on that log;
- a route on one consumer group needs ``describe`` on the group, and the
  list of groups shows only those the user may describe (group grants);
- admin actions (create and change logs, reset a group, drain a node) need
  admin on every log, as Kafka's admin APIs do on the Kafka front;
- the cluster-wide views (status, the log list) need the operation on some
  log.

The page and its files, and ``/openapi.json``, need no token: the page asks
for one.  Users and grants are read from the epoch store (``security.Access``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..security import Access
from ._http import HttpError
from ._routes import GROUP_OPS, OPS, TOKEN_IN_QUERY
from ._views import parse_log_id

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._http import Request, Route


class Gate:
    """``App.before`` for a secure console (see the module docstring)."""

    def __init__(self, client: AsyncClient) -> None:
        async def read() -> dict[str, Any]:
            doc: dict[str, Any] = await client.view.astore.run(lambda s: s.security())
            return doc

        self.access = Access(read, client.view.range_name)

    async def __call__(self, request: Request, route: Route) -> None:
        where = (route.method, route.template)
        op = OPS.get(where)
        if op is None:
            return  # the page, its files, the OpenAPI document
        token = _token(request, where in TOKEN_IN_QUERY)
        if token is None:
            raise HttpError(401, "this console needs a token (Authorization: Bearer ...)")
        user = await self.access.user_of_token(token)
        if user is None:
            raise HttpError(401, "unknown token")
        group_op = GROUP_OPS.get(where)
        if group_op is not None:
            await self._group(request, user, group_op)
            return
        log_text = request.params.get("log")
        log_id = None if log_text is None else parse_log_id(log_text)
        if op == "admin":
            if not await self.access.may(user, "admin", None):
                raise HttpError(403, f"user {user} may not do this: it needs admin on all logs")
            return
        if log_id is not None:
            if not await self.access.may(user, op, log_id):
                raise HttpError(403, f"user {user} may not {op} on log {log_id}")
            return
        if not await self.access.may_somewhere(user, op):
            raise HttpError(403, f"user {user} may not {op} on any log")

    async def _group(self, request: Request, user: str, op: str) -> None:
        access = self.access

        async def sees(group: str) -> bool:
            return await access.may_group(user, op, group)

        request.sees_group = sees
        group = request.params.get("group")
        if group is not None and not await sees(group):
            raise HttpError(403, f"user {user} may not {op} group {group}")


def _token(request: Request, in_query: bool) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return (request.query.get("token") or None) if in_query else None

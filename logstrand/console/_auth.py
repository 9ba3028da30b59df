"""The console in secure mode: every API request names its user by a token
(``Authorization: Bearer lst_...``, or ``?token=`` where a browser cannot
set a header: the live tail's EventSource), and may do only what the user's
grants allow, as on the native protocol (docs/security.md):

- a route on one log (``/api/logs/{log}...``) needs its operation (read,
  trim) on that log;
- admin actions (create and change logs, reset a group, drain a node) need
  admin on every log, as Kafka's admin APIs do on the Kafka front;
- the cluster-wide views (status, the log list, groups) need the operation
  on some log.

The page and its files, and ``/openapi.json``, need no token: the page asks
for one.  Users and grants are read from the epoch store (``security.Access``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..security import Access
from ._http import HttpError
from ._routes import OPS

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._http import Request, Route


class Gate:
    """``App.before`` for a secure console (see the module docstring)."""

    def __init__(self, client: AsyncClient) -> None:
        async def read() -> dict[str, Any]:
            doc: dict[str, Any] = await client.view.astore.run(lambda s: s.security())
            return doc

        self.access = Access(read)

    async def __call__(self, request: Request, route: Route) -> None:
        op = OPS.get((route.method, route.template))
        if op is None:
            return  # the page, its files, the OpenAPI document
        token = _token(request)
        if token is None:
            raise HttpError(401, "this console needs a token (Authorization: Bearer ...)")
        user = await self.access.user_of_token(token)
        if user is None:
            raise HttpError(401, "unknown token")
        log_text = request.params.get("log")
        log_id = int(log_text) if log_text and log_text.isdigit() else None
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


def _token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query.get("token") or None

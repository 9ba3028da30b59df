"""The HTTP admin API: every route with what it takes and answers, in one
table (``API``) that both serves requests and writes ``/openapi.json``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio

from . import _actions, _records, _transactions, _views
from ._http import EventStream, HttpError, Request, Response, json_response, parse_int, route

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ._http import Route

#: Live tails served at once by one console (each is a read stream).
TAILS_MAX = 64
#: Node ids run 1..NODE_ID_MAX (the wire's u32).
NODE_ID_MAX = 2**32 - 1


@attrs.frozen
class Param:
    name: str
    where: str  # "path" or "query"
    type: str = "string"
    description: str = ""


@attrs.frozen
class Api:
    """One operation of the API: its route, what it is, and what it answers."""

    method: str
    path: str
    handler: str
    summary: str
    params: tuple[Param, ...] = ()
    #: The request body's properties (a JSON object), for POST/PATCH.
    body: dict[str, str] | None = None
    #: Keys every answer has (the OpenAPI schema's ``required``; the tests
    #: check each answer against it).
    answers: tuple[str, ...] = ()
    #: What the operation needs of a user in secure mode: read, append,
    #: trim or admin (``security``), on the log in the path when there is one.
    op: str = "read"
    #: Or, for the routes about consumer groups, the operation on the group
    #: in the path (read, describe, delete); a list of groups shows those
    #: the user may describe.
    group_op: str | None = None
    events: bool = False


LOG = Param("log", "path", "integer", "a log id")
GROUP = Param("group", "path", "string", "a consumer group")
NODE = Param("node", "path", "integer", "a node id")
TXN = Param("txn", "path", "string", "a transactional id")
DRY_RUN = {"dry_run": "boolean"}

API: tuple[Api, ...] = (
    Api("GET", "/api/status", "status", "The nodes, their state and load; rebuilding",
        answers=("epoch_store", "nodes", "storage_state", "drained", "rebuilding", "logs",
                 "log_ranges")),
    Api("GET", "/api/logs", "logs", "A page of the logs matching q (an id, A..B or a name)",
        (Param("q", "query"), Param("offset", "query", "integer"),
         Param("limit", "query", "integer")),
        answers=("total", "offset", "limit", "logs")),
    Api("GET", "/api/ranges", "ranges", "The log ranges, named or not, with their attributes",
        answers=("ranges",)),
    Api("POST", "/api/logs", "create_logs", "Create logs first..last",
        body={"first": "integer", "last": "integer", "name": "string", "attributes": "object"},
        answers=("range",), op="admin"),
    Api("GET", "/api/logs/{log}", "log", "One log: head, tail, sequencer, placement, size",
        (LOG,), answers=("log_id", "head", "tail", "epoch", "nodeset", "epochs", "attributes")),
    Api("PATCH", "/api/logs/{log}", "update_logs", "Change the attributes of the range "
        "starting at this log", (LOG,), body={"attributes": "object"}, answers=("range",),
        op="admin"),
    Api("GET", "/api/logs/{log}/records", "records", "Records and gaps from start",
        (LOG, Param("start", "query", description="oldest, tail, time:MS or an LSN"),
         Param("limit", "query", "integer")),
        answers=("items", "next", "tail", "at_tail")),
    Api("GET", "/api/logs/{log}/tail", "tail", "New records as server-sent events",
        (LOG,), events=True),
    Api("POST", "/api/logs/{log}/trim", "trim", "Trim to an LSN or by age (dry_run first)",
        (LOG,), body={"to": "string", "older_than": "string", **DRY_RUN},
        answers=("head", "head_before", "records_approx", "dry_run"), op="trim"),
    Api("GET", "/api/groups", "groups", "Consumer groups and their lag", answers=("groups",),
        group_op="describe"),
    Api("GET", "/api/groups/{group}", "group", "One group: position and lag per log, members",
        (GROUP,), answers=("group", "logs", "lag_records", "membership"), group_op="describe"),
    Api("POST", "/api/groups/{group}/reset", "reset", "Move a group's position (dry_run first)",
        (GROUP,), body={"log": "integer", "how": "string", "value": "integer", **DRY_RUN},
        answers=("committed", "committed_before", "dry_run"), op="admin"),
    Api("GET", "/api/transactions", "transactions", "Transactional ids and their transactions",
        (Param("open", "query", "boolean", "only the open ones"),
         Param("limit", "query", "integer")),
        answers=("total", "open", "transactions"), op="admin"),
    Api("POST", "/api/transactions/{txn}/abort", "abort_transaction",
        "Abort an id's open transaction (dry_run first)", (TXN,), body=DRY_RUN,
        answers=("id", "state_before", "dry_run"), op="admin"),
    Api("POST", "/api/nodes/{node}/drain", "drain", "Drain a node (dry_run first)",
        (NODE,), body=DRY_RUN, answers=("node_id", "storage_state", "dry_run"), op="admin"),
    Api("POST", "/api/nodes/{node}/undrain", "undrain", "Return a drained node to service",
        (NODE,), body=DRY_RUN, answers=("node_id", "dry_run"), op="admin"),
)  # fmt: skip


#: (method, path template) -> the operation it needs in secure mode.
OPS = {(a.method, a.path): a.op for a in API}
#: (method, path template) -> the operation on its group (routes about groups).
GROUP_OPS = {(a.method, a.path): a.group_op for a in API if a.group_op}
#: The routes a browser reaches with EventSource, which cannot set a header:
#: the only ones that take a token in the query (``?token=``).
TOKEN_IN_QUERY = frozenset((a.method, a.path) for a in API if a.events)


class Handlers:
    """The API's handlers over one client of the cluster."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.tails = trio.Semaphore(TAILS_MAX)

    def routes(self) -> list[Route]:
        return [route(a.method, a.path, getattr(self, a.handler)) for a in API]

    async def status(self, r: Request) -> Response:
        return json_response(await _views.cluster_status(self.client))

    async def logs(self, r: Request) -> Response:
        await self.client.view.refresh()  # ranges created or changed since
        ranges = self.client.view.ranges
        page = _views.list_logs(
            ranges, r.arg("q", "") or "", r.int_arg("offset", 0), r.int_arg("limit", 100, 1)
        )
        return json_response(page)

    async def ranges(self, r: Request) -> Response:
        await self.client.view.refresh()
        return json_response(_views.ranges_doc(self.client.view.ranges))

    async def log(self, r: Request) -> Response:
        return json_response(await _views.log_doc(self.client, _log_of(r)))

    async def records(self, r: Request) -> Response:
        start = r.arg("start", "oldest") or "oldest"
        page = await _records.records_page(
            self.client, _log_of(r), start, r.int_arg("limit", 100, 1)
        )
        return json_response(page)

    async def tail(self, r: Request) -> EventStream:
        log_id = _log_of(r)
        await self.client.log_attributes(log_id)  # an unknown log: 404 before the stream
        if self.tails.value == 0:
            raise HttpError(503, f"{TAILS_MAX} live tails are open already")

        async def run(emit: Any) -> None:
            async with self.tails:
                await _records.live_tail(self.client, log_id, emit)

        return EventStream(run)

    async def trim(self, r: Request) -> Response:
        return json_response(await _actions.trim(self.client, _log_of(r), r.json()))

    async def groups(self, r: Request) -> Response:
        return json_response(await _views.groups_doc(self.client, r.sees_group))

    async def group(self, r: Request) -> Response:
        return json_response(await _views.group_doc(self.client, r.params["group"]))

    async def reset(self, r: Request) -> Response:
        return json_response(await _actions.reset_group(self.client, r.params["group"], r.json()))

    async def transactions(self, r: Request) -> Response:
        only_open = r.arg("open", "false")
        if only_open not in ("true", "false"):
            raise HttpError(400, "open must be true or false")
        limit = r.int_arg("limit", 1000, 1, 100_000)
        return json_response(
            await _transactions.transactions_doc(self.client, only_open == "true", limit)
        )

    async def abort_transaction(self, r: Request) -> Response:
        doc = await _transactions.abort(self.client, r.params["txn"], r.json())
        return json_response(doc)

    async def drain(self, r: Request) -> Response:
        return json_response(await _actions.drain(self.client, _node_of(r), r.json()))

    async def undrain(self, r: Request) -> Response:
        return json_response(await _actions.undrain(self.client, _node_of(r), r.json()))

    async def create_logs(self, r: Request) -> Response:
        return json_response(await _actions.create_logs(self.client, r.json()))

    async def update_logs(self, r: Request) -> Response:
        return json_response(await _actions.update_logs(self.client, _log_of(r), r.json()))


def _log_of(r: Request) -> int:
    return _views.parse_log_id(r.params["log"])


def _node_of(r: Request) -> int:
    return parse_int(r.params["node"], "node", 1, NODE_ID_MAX)


def openapi(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``API``."""
    paths: dict[str, Any] = {}
    for a in API:
        op: dict[str, Any] = {
            "operationId": a.handler,
            "summary": a.summary,
            "parameters": [
                {
                    "name": p.name,
                    "in": p.where,
                    "required": p.where == "path",
                    "schema": {"type": p.type},
                    **({"description": p.description} if p.description else {}),
                }
                for p in a.params
            ],
            "responses": _responses(a),
            "x-logstrand-grant": f"group:{a.group_op}" if a.group_op else a.op,
        }
        if a.body is not None:
            op["requestBody"] = {
                "required": False,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {k: {"type": t} for k, t in a.body.items()},
                        }
                    }
                },
            }
        paths.setdefault(a.path, {})[a.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "logstrand admin API", "version": version},
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}},
                }
            },
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"token": []}],
    }


def _responses(a: Api) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    if a.events:
        ok: dict[str, Any] = {
            "description": "server-sent events, each a JSON object with a type: start, "
            "records (with arrived and skipped counts), ping",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    else:
        ok = {
            "description": "OK",
            "content": {
                "application/json": {"schema": {"type": "object", "required": list(a.answers)}}
            },
        }
    out: dict[str, Any] = {"200": ok}
    for code, why in (
        ("400", "bad input"),
        ("401", "no token (secure mode)"),
        ("403", "not granted"),
        ("404", "no such log, group or page"),
    ):
        out[code] = {"description": why, **error}
    return out

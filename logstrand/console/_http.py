"""A small ASGI layer for the console: routes, bounded request bodies, JSON
and static responses, server-sent events, and errors as JSON.

The console serves a handful of routes; a framework would add more than it
saves.  Everything here is bounded: a request body above ``BODY_MAX`` is
refused (413) before it is read whole, a path or query that does not parse
is a 400, and an exception a handler did not expect is a 500 with its text,
never a dead server.  Before any route, the request must come under one of
the console's names and, when it changes something, as JSON from the
console's own origin (``_origin``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import urllib.parse
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import AccessDeniedError, InvalidArgumentError, LogstrandError, NotFoundError
from ._origin import SAFE_HEADERS, change_refusal, host_refusal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

_log = logging.getLogger("logstrand.console")

#: A request body may be at most this big (the API's bodies are small JSON).
BODY_MAX = 64 * 1024

Scope = dict[str, Any]


class HttpError(Exception):
    """An answer other than 200: its status and what to tell the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


#: What an integer in a path or a query may look like (``int()`` also takes
#: "²", "1_000" and " 7 ").
_INTEGER = re.compile(r"-?[0-9]{1,20}")


def parse_int(text: str, what: str, lo: int, hi: int) -> int:
    """``text`` as an integer in ``lo..hi``, or a 400 naming ``what``."""
    if not _INTEGER.fullmatch(text) or not lo <= int(text) <= hi:
        raise HttpError(400, f"{what} must be an integer from {lo} to {hi}, not {text[:40]!r}")
    return int(text)


async def _everyone(_group: str) -> bool:
    return True


@attrs.define
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    params: dict[str, str]
    body: bytes = b""
    #: Whether the user may see a consumer group (secure mode: its grants;
    #: set by the gate before the handler runs).
    sees_group: Callable[[str], Awaitable[bool]] = _everyone

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (an empty body: {})."""
        if not self.body:
            return {}
        try:
            doc = json.loads(self.body)
        except ValueError as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise HttpError(400, "the body must be a JSON object")
        return doc

    def arg(self, name: str, default: str | None = None) -> str | None:
        return self.query.get(name, default)

    def int_arg(self, name: str, default: int, lo: int = 0, hi: int = 1 << 62) -> int:
        text = self.query.get(name)
        return default if text is None else parse_int(text, name, lo, hi)


@attrs.frozen
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"


@attrs.frozen
class EventStream:
    """A response of server-sent events: ``run(emit)`` runs until it returns
    or the client goes away; each ``emit(doc)`` sends one ``data:`` line of
    JSON at once."""

    run: Callable[[Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(doc, separators=(",", ":")).encode())


@attrs.frozen
class Route:
    method: str
    pattern: re.Pattern[str]
    template: str
    handler: Any


def route(method: str, template: str, handler: Any) -> Route:
    """A route from a path template (``/api/logs/{log}``): each ``{name}``
    matches one path segment."""
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
    return Route(method, re.compile(f"^{regex}$"), template, handler)


_ERRORS: tuple[tuple[type[Exception], int], ...] = (
    (NotFoundError, 404),
    (AccessDeniedError, 403),
    (InvalidArgumentError, 400),
    (LogstrandError, 503),
)


class App:
    """The ASGI application: ``routes`` in order, the first that matches;
    ``names``: the host names it answers under besides addresses and
    localhost (``_origin``)."""

    def __init__(
        self, routes: list[Route], before: Any = None, names: frozenset[str] = frozenset()
    ) -> None:
        self.routes = routes
        #: Called with each request before its handler (authentication).
        self.before = before
        self.names = names

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no WebSockets: the live tail is server-sent events
        try:
            answer = await self._answer(scope, receive)
        except HttpError as exc:
            answer = json_response({"error": exc.message}, exc.status)
        if isinstance(answer, EventStream):
            await _stream(answer, receive, send)
            return
        headers = [
            (b"content-type", answer.content_type.encode()),
            (b"content-length", str(len(answer.body)).encode()),
            (b"cache-control", b"no-store"),
            *SAFE_HEADERS,
        ]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})

    async def _answer(self, scope: Scope, receive: Any) -> Response | EventStream:
        method, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        why = host_refusal(headers.get("host"), self.names)
        if why is not None:
            raise HttpError(403, why)
        refused = change_refusal(method, headers, scope.get("scheme", "http"))
        if refused is not None:
            raise HttpError(*refused)
        allowed = []
        for r in self.routes:
            m = r.pattern.match(path)
            if m is None:
                continue
            if r.method != method:
                allowed.append(r.method)
                continue
            request = Request(
                method,
                path,
                _query(scope.get("query_string", b"")),
                headers,
                {k: urllib.parse.unquote(v) for k, v in m.groupdict().items()},
            )
            if method in ("POST", "PUT", "PATCH", "DELETE"):
                request.body = await _body(request, receive)
            try:
                if self.before is not None:
                    await self.before(request, r)
                answer: Response | EventStream = await r.handler(request)
            except HttpError:
                raise
            except Exception as exc:
                raise _as_http(exc) from None
            return answer
        if allowed:
            raise HttpError(405, f"{method} is not allowed on {path} ({', '.join(allowed)} is)")
        raise HttpError(404, f"no such page: {path}")


def _as_http(exc: Exception) -> HttpError:
    for kind, status in _ERRORS:
        if isinstance(exc, kind):
            return HttpError(status, str(exc))
    _log.exception("console: a request failed")
    return HttpError(500, f"{type(exc).__name__}: {exc}")


def _query(raw: bytes) -> dict[str, str]:
    try:
        pairs = urllib.parse.parse_qsl(raw.decode("ascii"), strict_parsing=False)
    except UnicodeDecodeError:
        raise HttpError(400, "the query is not ASCII") from None
    return dict(pairs)


async def _body(request: Request, receive: Any) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > BODY_MAX):
        raise HttpError(413, f"a request body may be at most {BODY_MAX} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(400, "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > BODY_MAX:
            raise HttpError(413, f"a request body may be at most {BODY_MAX} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _stream(stream: EventStream, receive: Any, send: Any) -> None:
    """Run the stream until it ends or the client goes away."""
    import trio

    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-store"),
        (b"x-accel-buffering", b"no"),
        *SAFE_HEADERS,
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def emit(doc: dict[str, Any]) -> None:
        data = json.dumps(doc, separators=(",", ":"))
        await send(
            {"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": True}
        )

    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        try:
            await stream.run(emit)
        except Exception as exc:  # the stream's own failure ends it, said in one event
            if isinstance(exc, HttpError):
                problem = exc.message
            else:
                problem = str(_as_http(exc).message)
            with contextlib.suppress(Exception):
                await emit({"type": "error", "error": problem})
        nursery.cancel_scope.cancel()
    with contextlib.suppress(Exception):  # the client may be gone
        await send({"type": "http.response.body", "body": b""})

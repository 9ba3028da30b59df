"""Serving the console: the ASGI app (API, OpenAPI document, the page and
its assets) under hypercorn on the caller's trio loop, in a node
(``logstrand node --http-port``) or alone (``logstrand console``).

hypercorn parses HTTP (h11) with its own bounds: a request head at most
``h11_max_incomplete_size``, idle connections closed after
``keep_alive_timeout``; the app bounds bodies (``_http.BODY_MAX``) and live
tails (``_routes.TAILS_MAX``).
"""

from __future__ import annotations

import importlib.resources
import logging
import mimetypes
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import InvalidArgumentError, leaves
from ._auth import Gate
from ._http import App, HttpError, Request, Response, json_response, route
from ._routes import Handlers, openapi

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import NodeConfig

_log = logging.getLogger("logstrand.console")

#: The page's files, shipped in the package (``console/static``): no build step.
STATIC = importlib.resources.files("logstrand.console") / "static"
_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("logstrand")
    except PackageNotFoundError:
        return "0"


def make_app(
    client: AsyncClient, *, secure: bool = False, names: frozenset[str] = frozenset()
) -> App:
    """The console's ASGI app over ``client``; ``secure``: every API request
    carries a user's token and may do only what the user's grants allow
    (``_auth``); ``names``: the host names it answers under, besides IP
    addresses and localhost (``_origin``)."""
    handlers = Handlers(client)
    document = openapi(_version())

    async def spec(r: Request) -> Response:
        return json_response(document)

    async def page(r: Request) -> Response:
        return _file("index.html")

    async def asset(r: Request) -> Response:
        return _file(r.params["name"])

    return App(
        [
            *handlers.routes(),
            route("GET", "/openapi.json", spec),
            route("GET", "/", page),
            route("GET", "/static/{name}", asset),
        ],
        before=Gate(client) if secure else None,
        names=names,
    )


def _file(name: str) -> Response:
    if "/" in name or name.startswith("."):
        raise HttpError(404, f"no such file: {name}")
    path = STATIC / name
    if not path.is_file():
        raise HttpError(404, f"no such file: {name}")
    suffix = name[name.rfind(".") :]
    kind = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Response(200, path.read_bytes(), f"{kind}; charset=utf-8")


def _config(host: str, port: int, tls: tuple[str, str] | None) -> Any:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{host}:{port}"]
    if tls is not None:
        config.certfile, config.keyfile = tls
    config.accesslog = None
    config.errorlog = _log
    config.keep_alive_timeout = 30
    config.graceful_timeout = 1
    return config


async def serve_console(
    client: AsyncClient,
    host: str,
    port: int,
    *,
    secure: bool = False,
    tls: tuple[str, str] | None = None,
    names: tuple[str, ...] = (),
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the console over ``client`` on ``host:port`` (0: any free port)
    until cancelled; ``task_status`` gets the address it bound.  ``secure``:
    tokens and grants (``make_app``); ``tls``: (certificate, key) files to
    serve HTTPS with; ``names``: host names it answers under besides
    ``host``, IP addresses and localhost (``--http-allowed-hosts``)."""
    from hypercorn.trio import serve

    known = frozenset(n.strip("[]").lower().rstrip(".") for n in (host, *names))
    app, config = make_app(client, secure=secure, names=known), _config(host, port, tls)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        where = binds[0].rsplit("/", 1)[-1]
        h, _, p = where.rpartition(":")
        task_status.started((h.strip("[]"), int(p)))


def bind_error(exc: BaseException) -> OSError | None:
    """The OSError of a port that could not be bound, from what starting the
    server raised (hypercorn's nurseries wrap it in exception groups)."""
    return next((e for e in leaves(exc) if isinstance(e, OSError)), None)


@attrs.frozen
class NodeConsoleOptions:
    #: Served on the host the node listens on.
    port: int
    #: Host names it answers under besides the node's own, IP addresses and
    #: localhost (``--http-allowed-hosts``).
    allowed_hosts: tuple[str, ...] = ()


class NodeConsole:
    """A node extension (``storage.NodeExtension``): the console and HTTP
    admin API on ``options.port``; the node records the port in its entry of
    the cluster configuration (``NodeConfig.http_port``)."""

    def __init__(self, options: NodeConsoleOptions) -> None:
        self.options = options

    def configure(self, cfg: NodeConfig) -> NodeConfig:
        return attrs.evolve(cfg, http_port=self.options.port)

    async def run(
        self, host: Any, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        from ..client import open_client

        cfg = host.view.nodes[host.node_id]
        bind = host.listen[0] if host.listen else cfg.host
        files = host.options.tls  # secure mode: HTTPS with the node's certificate
        tls = None if files is None else (files.cert, files.key)
        async with (
            open_client(host.url, credentials=host.credentials) as client,
            trio.open_nursery() as nursery,
        ):
            names = (cfg.host, *self.options.allowed_hosts)
            serve = partial(serve_console, secure=tls is not None, tls=tls, names=names)
            try:
                where = await nursery.start(serve, client, bind, self.options.port)
            except BaseException as exc:
                refused = bind_error(exc)
                if refused is None:
                    raise
                raise InvalidArgumentError(
                    f"--http-port {self.options.port}: cannot listen on {bind}: {refused.strerror}"
                ) from None
            scheme = "https" if tls else "http"
            _log.info("node %d: console on %s://%s:%d/", host.node_id, scheme, *where)
            task_status.started()

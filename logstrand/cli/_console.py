"""``logstrand console``: the console and HTTP admin API on their own,
outside the nodes (docs/console.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import UrlOption, fail, require_url, serve_until_signalled


def serve_console(
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free one).")
    ] = 8080,
    url: UrlOption = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only).")
    ] = "127.0.0.1",
    tls_cert: Annotated[
        str | None, typer.Option("--tls-cert", help="Serve HTTPS with this certificate (PEM).")
    ] = None,
    tls_key: Annotated[str | None, typer.Option("--tls-key", help="Its private key (PEM).")] = None,
    allowed_hosts: Annotated[
        str,
        typer.Option(
            "--allowed-hosts",
            help="Host names it answers under besides --host, IP addresses and localhost, "
            "comma-separated; other names are refused (DNS rebinding).",
        ),
    ] = "",
) -> None:
    """Serve the console (a web page) and the HTTP admin API for the cluster
    at --url until SIGINT/SIGTERM, as a client with the credentials of
    --token/--ca (or LOGSTRAND_TOKEN/LOGSTRAND_CA).  With those (a secure
    cluster) every API request must carry a user's token and may do what the
    user's grants allow.  Prints 'console http://HOST:PORT/' once it listens."""
    import trio

    from ..client import open_client
    from ..console import serve_console as serve
    from ..security import credentials_from_env

    cluster = require_url(url)
    credentials = credentials_from_env()
    if (tls_cert is None) != (tls_key is None):
        fail("HTTPS needs both --tls-cert and --tls-key")
    tls = None if tls_cert is None or tls_key is None else (tls_cert, tls_key)
    scheme = "http" if tls is None else "https"
    secure = credentials is not None

    names = tuple(n.strip() for n in allowed_hosts.split(",") if n.strip())

    async def start(task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        async with open_client(cluster, credentials=credentials) as client:
            await serve(
                client, host, port, secure=secure, tls=tls, names=names, task_status=task_status
            )

    serve_until_signalled(start, host, port, lambda at: f"console {scheme}://{at[0]}:{at[1]}/")

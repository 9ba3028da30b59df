"""What every command shares: the --url and --json options, output, errors."""

from __future__ import annotations

import inspect
import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from .._units import parse_duration_ms, parse_size, parse_uint
from ..epochstore import EpochStore, open_epoch_store
from ..records import LOG_ID_MAX

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..client import Client


def _console(*, stderr: bool = False) -> Console:
    """Rich output as a terminal shows it; into a pipe or a file, whole lines
    (no wrapping, tables at their full width, no colour), unless COLUMNS says
    otherwise."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(stderr=stderr, soft_wrap=stderr)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True, no_color=True)


#: Width of tables written into a pipe: wide enough that no column is cut.
PIPE_WIDTH = 10_000
console = _console()
err_console = _console(stderr=True)

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="LOGSTRAND_URL",
        help="Cluster URL: sqlite:///path/cluster.db or zk://host:port/cluster "
        "(or set LOGSTRAND_URL).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def parse_log_id(text: str | int) -> int:
    """A log id as typed: ASCII digits, 1 to the largest log id (``int()``
    would read ``𝟙`` as 1).  (A configuration file gives an int.)"""
    try:
        return parse_uint(str(text), "log id", low=1, high=LOG_ID_MAX)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_node_id(text: str | int) -> int:
    """A node id as typed: ASCII digits, 1 to 2^31 - 1 (a file gives an int)."""
    from ..epochstore._model import NODE_ID_MAX, NODE_ID_MIN

    try:
        return parse_uint(str(text), "node id", low=NODE_ID_MIN, high=NODE_ID_MAX)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


LogArg = Annotated[int, typer.Argument(help="Log id.", parser=parse_log_id, metavar="LOG")]

#: Exit codes: 0 done, 1 the operation failed, 2 bad usage or input.
EXIT_FAILED = 1
EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    err_console.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def require_url(url: str | None) -> str:
    """The cluster URL from --url or LOGSTRAND_URL, or a usage error."""
    if not url:
        fail("no cluster URL: pass --url or set LOGSTRAND_URL")
    return url


def connect_client(url: str) -> Client:
    """A client with the credentials of ``--token``/``--ca``/``--cert``/``--key``
    or ``LOGSTRAND_TOKEN``/``LOGSTRAND_CA``/``LOGSTRAND_CERT``/``LOGSTRAND_KEY``."""
    from ..client import connect
    from ..security import credentials_from_env

    return connect(url, credentials=credentials_from_env())


def open_store(url: str | None, *, create: bool = False) -> EpochStore:
    """The epoch store of ``--url``; ``create``: for the commands that make a
    cluster (an SQLite file that is not there yet), the others refuse."""
    return open_epoch_store(require_url(url), create=create)


def duration_option(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration_ms(value)
    except ValueError as exc:
        fail(f"{name}: {exc}")


def size_option(value: str, name: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        fail(f"{name}: {exc}")


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


# -- commands whose options are declared in a table ------------------------------

_KEYWORD = inspect.Parameter.KEYWORD_ONLY
REQUIRED = inspect.Parameter.empty


def keyword(name: str, kind: Any, default: Any, option: Any) -> inspect.Parameter:
    """One option of a command whose parameters are a table (``declared``):
    ``name`` is the parameter, ``option`` its ``typer.Option``/``Argument``."""
    return inspect.Parameter(name, _KEYWORD, default=default, annotation=Annotated[kind, option])


def declared(*parameters: inspect.Parameter) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a ``def command(**params)`` these parameters, for typer (which
    reads ``__signature__``); the command gets them as keyword arguments."""

    def give(command: Callable[..., Any]) -> Callable[..., Any]:
        command.__signature__ = inspect.Signature(list(parameters))  # type: ignore[attr-defined]
        return command

    return give


URL = inspect.Parameter("url", _KEYWORD, default=None, annotation=UrlOption)
JSON = inspect.Parameter("as_json", _KEYWORD, default=False, annotation=JsonOption)


def serve_until_signalled(
    start: Callable[..., Awaitable[None]],
    host: str,
    port: int,
    announce: Callable[[tuple[str, int]], str],
) -> None:
    """Run the server ``start`` (a trio task that reports the address it
    bound through ``task_status``) until SIGINT/SIGTERM, printing
    ``announce(address)`` once it listens.  A port that cannot be bound is
    one line of error (exit 1), however deep in nurseries it was raised."""
    import signal

    import trio

    from ..errors import leaves

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    where = await nursery.start(start)
                except BaseException as exc:
                    refused = next((e for e in leaves(exc) if isinstance(e, OSError)), None)
                    if refused is None:
                        raise
                    fail(f"cannot listen on {host}:{port}: {refused.strerror}", 1)
                console.print(announce(where), highlight=False)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)

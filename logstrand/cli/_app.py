"""The ``logstrand`` command line.

Until the cluster exists, the command works on a node's local store:
``logstrand logsdb demo`` shows appends, reads, find-time and trim on a LogsDB
in a directory, and ``logstrand logsdb inspect`` shows what one holds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .._units import format_bytes
from ..batch import make_batch
from ..errors import InvalidArgumentError, LogstrandError, collapse
from ..logsdb import LogsDB, LogsDBOptions, PutBatch
from ..types import format_lsn
from . import _leaving
from ._append import append
from ._cluster import dev_app
from ._common import EXIT_FAILED, EXIT_USAGE, console, err_console
from ._console import serve_console
from ._groups import groups_app
from ._kafka import kafka_app
from ._log_ops import compact, info, trim
from ._logs import logs_app
from ._node import node
from ._nodes import cluster_app, drain, nodes_app, rebuild, status, undrain
from ._read import find_time, read
from ._security import acl_app, tls_app, users_app
from ._transactions import transactions_app

app = typer.Typer(
    name="logstrand",
    help="logstrand: a distributed log store in the style of LogDevice.",
    no_args_is_help=True,
    # `logstrand --install-completion` (bash, zsh, fish), or
    # `logstrand --show-completion bash` to see the script.
    add_completion=True,
)
logsdb_app = typer.Typer(help="Work on a node's local log store (LogsDB) directly.")
app.add_typer(logsdb_app, name="logsdb")
app.add_typer(logs_app, name="logs")
app.add_typer(dev_app, name="dev")
app.command("node")(node)
app.command("append")(append)
app.command("read")(read)
app.command("find-time")(find_time)
app.command("trim")(trim)
app.command("info")(info)
app.command("status")(status)
app.command("compact")(compact)
app.add_typer(nodes_app, name="nodes")
app.command("rebuild")(rebuild)
app.command("drain")(drain)
app.command("undrain")(undrain)
app.add_typer(cluster_app, name="cluster")
app.add_typer(users_app, name="users")
app.add_typer(acl_app, name="acl")
app.add_typer(groups_app, name="groups")
app.add_typer(transactions_app, name="transactions")
app.add_typer(tls_app, name="tls")
app.add_typer(kafka_app, name="kafka")
app.command("console")(serve_console)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"logstrand {version('logstrand')}")
        except PackageNotFoundError:  # run from a source tree that is not installed
            print("logstrand (not installed)")
        raise typer.Exit(0)


@app.callback()
def _credentials(
    _show_version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_version
        ),
    ] = False,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", help="A user's token (or set LOGSTRAND_TOKEN).", show_default=False
        ),
    ] = None,
    ca: Annotated[
        str | None,
        typer.Option(
            "--ca", help="The cluster's CA certificate (or set LOGSTRAND_CA).", show_default=False
        ),
    ] = None,
    cert: Annotated[
        str | None,
        typer.Option(
            "--cert", help="A client certificate (or LOGSTRAND_CERT).", show_default=False
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Its key (or LOGSTRAND_KEY).", show_default=False),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="The cluster's URL (or LOGSTRAND_URL); after the command too.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """logstrand: a distributed log store in the style of LogDevice.

    On a cluster with TLS, commands that talk to nodes take --ca and --token
    (or --cert/--key) before the command, or LOGSTRAND_CA and LOGSTRAND_TOKEN.
    """
    for name, value in (
        ("LOGSTRAND_URL", url),
        ("LOGSTRAND_TOKEN", token),
        ("LOGSTRAND_CA", ca),
        ("LOGSTRAND_CERT", cert),
        ("LOGSTRAND_KEY", key),
    ):
        if value:
            os.environ[name] = value


DirOption = Annotated[Path, typer.Option("--dir", help="LogsDB directory.")]


_human_bytes = format_bytes


def _hms(ts_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts_ms / 1000))


def _partition_table(db: LogsDB) -> Table:
    table = Table(title="partitions")
    for col in ("id", "starts at", "created", "logs", "bytes"):
        table.add_column(col, justify="right" if col in ("id", "logs", "bytes") else "left")
    for p in db.partitions():
        start = "-" if p.start_ts_ms == 0 else _hms(p.start_ts_ms)
        created = _hms(p.created_ms)
        table.add_row(str(p.id), start, created, str(p.logs), _human_bytes(p.bytes))
    return table


@logsdb_app.command("demo")
def demo(
    directory: DirOption = Path("run-data/logsdb-demo"),
    records: Annotated[int, typer.Option(min=1, max=10_000_000, help="Records per log.")] = 100_000,
    logs: Annotated[int, typer.Option(min=1, max=1000, help="Number of logs.")] = 3,
) -> None:
    """Write records to a few logs, read them back, find by time, trim and drop."""
    directory.mkdir(parents=True, exist_ok=True)
    with LogsDB.open(directory, LogsDBOptions()) as db:
        first = {log: db.last_lsn(log) + 1 for log in range(1, logs + 1)}
        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        done = 0
        while done < records:
            n = min(1000, records - done)
            puts = [
                PutBatch.of(
                    log,
                    make_batch(
                        range(first[log] + done, first[log] + done + n),
                        [b"record %d of log %d" % (first[log] + done + i, log) for i in range(n)],
                        timestamps_ms=now + done // 1000,
                    ),
                    copyset=(1,),
                )
                for log in range(1, logs + 1)
            ]
            db.write(puts, sync=False)
            done += n
        db.flush()
        wrote_s = time.perf_counter() - t0
        total = records * logs
        console.print(
            f"wrote {total:,} records to {logs} logs in {wrote_s:.2f} s "
            f"({total / wrote_s:,.0f} records/s)"
        )
        t0 = time.perf_counter()
        read = 0
        for log in range(1, logs + 1):
            start = first[log]
            while batch := db.read_batch(log, start, max_records=4096):
                read += len(batch)
                start = batch.lsns[-1] + 1
        read_s = time.perf_counter() - t0
        console.print(f"read {read:,} records back in {read_s:.2f} s ({read / read_s:,.0f}/s)")
        sample = db.read(1, first[1], max_records=3)
        for rec in sample:
            console.print(f"  log 1 {format_lsn(rec.lsn)}: {rec.payload!r}")
        mid = now + (records // 1000) // 2
        console.print(f"find-time log 1 at {mid}: first LSN {db.find_time(1, mid)}")
        db.new_partition()
        db.trim(1, first[1] + records - 1)
        console.print(f"trimmed log 1 up to {first[1] + records - 1}")
        console.print(_partition_table(db))
        dropped = db.drop_partitions()
        console.print(f"dropped partitions: {dropped or 'none (other logs still hold data)'}")
        console.print(f"disk used: {_human_bytes(db.disk_bytes())} in {directory}")


@logsdb_app.command("inspect")
def inspect(
    directory: DirOption,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the partitions and per-log directory of a LogsDB."""
    if not (directory / "CURRENT").exists():
        console.print(f"[red]error:[/] no LogsDB in {directory}")
        raise typer.Exit(2)
    with LogsDB.open(directory) as db:
        logs = {
            log: {
                "trim_point": db.trim_point(log),
                "last_lsn": db.last_lsn(log),
                "partitions": [pid for pid, _ in db.directory(log)],
                "records": sum(e.records for _, e in db.directory(log)),
            }
            for log in db.logs()
        }
        if as_json:
            out = {
                "partitions": [
                    {"id": p.id, "start_ts_ms": p.start_ts_ms, "bytes": p.bytes, "logs": p.logs}
                    for p in db.partitions()
                ],
                "logs": logs,
                "disk_bytes": db.disk_bytes(),
            }
            print(json.dumps(out))
            return
        console.print(_partition_table(db))
        table = Table(title="logs")
        for col in ("log", "trim point", "last LSN", "records", "partitions"):
            table.add_column(col, justify="right")
        for log, info in logs.items():
            table.add_row(
                str(log),
                str(info["trim_point"]),
                str(info["last_lsn"]),
                f"{info['records']:,}",
                str(len(info["partitions"])),  # type: ignore[arg-type]
            )
        console.print(table)


#: Options of the whole command that may be typed after the subcommand too
#: (`logstrand logs list --token T`). Not --key: `append --key` is a record's key.
_HOISTED = ("--token", "--ca", "--cert")


def hoist_credentials(args: list[str]) -> list[str]:
    """``args`` with the credentials options found after the subcommand moved
    before it, where the command-line parser takes them (``--url`` is an
    option of both places already)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # what follows is operands, whatever it looks like
            rest += args[i:]
            break
        name = arg.split("=", 1)[0]
        if name in _HOISTED:
            if "=" in arg:
                front.append(arg)
            else:
                front += args[i : i + 2]
                i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> int:
    """Run the command; every failure ends as one line on stderr and an exit code.

    Exit codes: 0 done, 1 the operation failed, 2 bad usage or input.
    """
    command = typer.main.get_command(app)
    args = hoist_credentials(sys.argv[1:] if argv is None else argv)
    try:
        try:
            result = command.main(args=args, prog_name="logstrand", standalone_mode=False)
        except BaseExceptionGroup as group:
            # Work done concurrently (a request to every node) fails as a
            # group: one error of ours, one line.
            raise collapse(group) from None
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return EXIT_FAILED
    except InvalidArgumentError as exc:
        err_console.print(f"[red]error:[/] {exc.args[0]}", highlight=False)
        return EXIT_USAGE
    except LogstrandError as exc:
        err_console.print(f"[red]error:[/] {exc.args[0]} ({exc.status.name})", highlight=False)
        return EXIT_FAILED
    except Exception as exc:
        # Usage errors of the command-line parser (bad option, bad number):
        # typer keeps their classes private, so recognise them by shape.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            console.print(ctx.get_help())
        else:
            err_console.print(f"[red]error:[/] {exc.format_message()}", highlight=False)
        return int(exc.exit_code) or EXIT_USAGE
    return result if isinstance(result, int) else 0


def entry_point() -> None:
    """The ``logstrand`` process: its command, under ``_leaving``'s policy
    for SIGTERM."""
    _leaving.install()
    try:
        code = main()
    finally:
        _leaving.leaving()
    raise SystemExit(code)

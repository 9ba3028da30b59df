"""``logstrand read`` and ``logstrand find-time``."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from .._units import format_bytes, looks_like_time, parse_time_ms
from ..client._reader_core import RecordRun
from ..types import LSN_OLDEST, TAIL, Gap, Record, format_lsn, parse_lsn
from ._common import (
    JsonOption,
    LogArg,
    UrlOption,
    connect_client,
    console,
    err_console,
    fail,
    print_json,
    require_url,
)


def _lsn_or_time(client: Any, log: int, text: str, name: str) -> int:
    try:
        if looks_like_time(text):
            return int(client.find_time(log, parse_time_ms(text)))
        return parse_lsn(text)
    except ValueError as exc:
        fail(f"{name}: {exc}")


def _text(data: bytes | None) -> str:
    if data is None:
        return "(tombstone)"
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def _item_json(log: int, item: Record | Gap) -> dict[str, Any]:
    if isinstance(item, Record):
        return {
            "log_id": log,
            "lsn": item.lsn,
            "timestamp": item.timestamp,
            "key": None if item.key is None else _text(item.key),
            "payload": None if item.payload is None else _text(item.payload),
        }
    return {"log_id": log, "gap": item.type.name, "lo": item.lo, "hi": item.hi}


def read(
    log: LogArg,
    start: Annotated[
        str, typer.Option("--from", help="An LSN (123 or e1n5) or a time (ISO 8601, '10m ago').")
    ] = "oldest",
    until: Annotated[str, typer.Option(help="An LSN, or 'tail' (the tail now).")] = "tail",
    follow: Annotated[bool, typer.Option(help="Keep reading new records as they come.")] = False,
    limit: Annotated[int | None, typer.Option(help="Stop after this many records.", min=1)] = None,
    gaps: Annotated[bool, typer.Option(help="Show gaps (trim, bridge, data loss).")] = True,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write JSON lines to this file, with a progress bar.",
            dir_okay=False,
        ),
    ] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print a log's records (and gaps) in LSN order; one JSON object a line with --json."""

    url = require_url(url)
    if follow and until != "tail":
        fail("--follow and --until exclude each other")
    if output is not None:
        if follow:
            fail("--output and --follow exclude each other")
        _read_to_file(url, log, start, until, limit, gaps, output)
        return
    with connect_client(url) as client:
        first = LSN_OLDEST if start == "oldest" else _lsn_or_time(client, log, start, "--from")
        if follow:
            last: int | Any = None
        elif until == "tail":
            last = TAIL
        else:
            last = _lsn_or_time(client, log, until, "--until")
        count = 0
        try:
            for item in client.read(log, first, last):
                if isinstance(item, Gap) and not gaps:
                    continue
                if as_json:
                    sys.stdout.write(json.dumps(_item_json(log, item)) + "\n")
                elif isinstance(item, Record):
                    console.print(
                        f"{format_lsn(item.lsn)}\t{item.timestamp}\t{_text(item.payload)}",
                        highlight=False,
                        markup=False,
                    )
                else:
                    lo, hi = format_lsn(item.lo), format_lsn(item.hi)
                    console.print(f"[yellow]gap {item.type.name} {lo}..{hi}[/]")
                if follow:
                    sys.stdout.flush()
                if isinstance(item, Record):
                    count += 1
                    if limit is not None and count >= limit:
                        break
        except KeyboardInterrupt:
            pass


def _read_to_file(
    url: str, log: int, start: str, until: str, limit: int | None, gaps: bool, output: Path
) -> None:

    try:
        out = output.open("w", encoding="utf-8")
    except OSError as exc:
        fail(f"--output: {exc.strerror}: {output}")
    records = size = 0
    with out, connect_client(url) as client:
        first = LSN_OLDEST if start == "oldest" else _lsn_or_time(client, log, start, "--from")
        last = TAIL if until == "tail" else _lsn_or_time(client, log, until, "--until")
        infos = client.log_info(log)
        copies = client.log_attributes(log).replication_factor
        approx = sum(i.records for i in infos) // max(1, copies)
        total = min(approx, limit) if limit is not None else approx
        with Progress(
            TextColumn(f"log {log}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[size]}"),
            TimeRemainingColumn(),
            console=err_console,
            transient=True,
        ) as progress:
            task = progress.add_task("read", total=total or None, size="")
            for batch in client.read_batches(log, first, last):
                lines = []
                for item in batch:
                    if isinstance(item, RecordRun):
                        take = len(item) if limit is None else min(len(item), limit - records)
                        for i in range(take):
                            rec = Record(
                                item.lsns[i], item.timestamps_ms[i], item.payloads[i], item.keys[i]
                            )
                            size += len(rec.payload or b"")
                            lines.append(json.dumps(_item_json(log, rec)))
                        records += take
                    elif gaps:
                        gap = Gap(item.type, item.lo, item.hi)
                        lines.append(json.dumps(_item_json(log, gap)))
                    if limit is not None and records >= limit:
                        break
                out.write("\n".join(lines) + "\n" if lines else "")
                progress.update(task, completed=records, size=format_bytes(size))
                if limit is not None and records >= limit:
                    break
    err_console.print(
        f"wrote {records:,} records ({format_bytes(size)} of payload) to {output}", highlight=False
    )


def find_time(
    log: LogArg,
    when: Annotated[str, typer.Argument(help="A time: ISO 8601, epoch ms, 'now', '10m ago'.")],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """The first LSN of the log with a timestamp at or after TIME."""

    url = require_url(url)
    try:
        ts = parse_time_ms(when)
    except ValueError as exc:
        fail(str(exc))
    with connect_client(url) as client:
        lsn = client.find_time(log, ts)
    if as_json:
        print_json({"log_id": log, "timestamp_ms": ts, "lsn": lsn})
    else:
        console.print(f"{lsn} ({format_lsn(lsn)})")

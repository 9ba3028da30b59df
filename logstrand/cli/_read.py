"""``logstrand read`` and ``logstrand find-time``."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from .._units import format_bytes, looks_like_time, parse_time_ms
from ..client import RecordRun
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

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


#: ``--from`` words: the start of the log, or just past its tail (new records only).
OLDEST_WORDS = ("oldest", "beginning", "earliest", "start")
TAIL_WORDS = ("end", "tail", "latest", "now")
FROM_HELP = (
    "Where to start: an LSN (123 or e1n5), a time (ISO 8601, '10m ago'), "
    f"{'/'.join(OLDEST_WORDS)} (the first record) or {'/'.join(TAIL_WORDS)} "
    "(only records appended from now on)."
)
FORMAT_HELP = (
    "Print each record as this format, as kcat's -f: %s payload, %k key, %o LSN "
    "(number), %O LSN (e1n5), %T timestamp (ms), %l log, %S payload bytes, "
    "%K key bytes, %h headers (n=v,...), \\n, \\t, %%%%.  Payload and key go out as "
    "they are."
)


def _lsn_or_time(client: Any, log: int, text: str, name: str) -> int:
    try:
        if looks_like_time(text):
            return int(client.find_time(log, parse_time_ms(text)))
        return parse_lsn(text)
    except ValueError as exc:
        fail(f"{name}: {exc}")


def _start(client: Any, log: int, text: str) -> int:
    """``--from``: a word, an LSN or a time."""
    word = text.strip().lower()
    if word in OLDEST_WORDS:
        return LSN_OLDEST
    if word in TAIL_WORDS:
        return int(client.tail_lsn(log)) + 1
    return _lsn_or_time(client, log, text, "--from")


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
            **_extras_json(item),
        }
    return {"log_id": log, "gap": item.type.name, "lo": item.lo, "hi": item.hi}


def _extras_json(rec: Record) -> dict[str, Any]:
    """A record's headers and create time, when it has any."""
    if rec.extra is None:
        return {}
    out: dict[str, Any] = {
        "headers": [[k, None if v is None else _text(v)] for k, v in rec.headers]
    }
    if rec.create_time is not None:
        out["create_time"] = rec.create_time
    return out


def _escaped(data: bytes | None) -> str:
    """A payload on one line: UTF-8 as it is, other bytes and control
    characters (newlines, tabs) escaped as Python writes them."""
    if data is None:
        return "(tombstone)"
    text = data.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _formatter(fmt: str | None) -> Callable[[int, Record], bytes]:
    """One record as bytes: the default line (LSN, timestamp, payload
    escaped onto one line, tab-separated) or a kcat-style ``--format``."""
    if fmt is None:
        return lambda log, r: (
            f"{format_lsn(r.lsn)}\t{r.timestamp}\t{_escaped(r.payload)}\n".encode()
        )
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    parts = re.split(r"(%.)", fmt)
    fields: dict[str, Callable[[int, Record], bytes]] = {
        "%s": lambda log, r: r.payload or b"",
        "%k": lambda log, r: r.key or b"",
        "%o": lambda log, r: str(r.lsn).encode(),
        "%O": lambda log, r: format_lsn(r.lsn).encode(),
        "%T": lambda log, r: str(r.timestamp).encode(),
        "%l": lambda log, r: str(log).encode(),
        "%S": lambda log, r: str(len(r.payload or b"")).encode(),
        "%K": lambda log, r: str(len(r.key or b"")).encode(),
        "%h": lambda log, r: b",".join(
            n.encode() + (b"" if v is None else b"=" + v) for n, v in r.headers
        ),
        "%%": lambda log, r: b"%",
    }
    bad = [x for x in parts if len(x) == 2 and x[0] == "%" and x not in fields]
    if bad:
        fail(f"--format: unknown field {bad[0]} (see --help)")
    pieces = [fields.get(x) or _literal(x.encode()) for x in parts if x]
    return lambda log, r: b"".join(f(log, r) for f in pieces)


def _literal(text: bytes) -> Callable[[int, Record], bytes]:
    return lambda log, r: text


def read(
    log: LogArg,
    start: Annotated[str, typer.Option("--from", help=FROM_HELP)] = "oldest",
    until: Annotated[str, typer.Option(help="An LSN, or 'tail' (the tail now).")] = "tail",
    follow: Annotated[bool, typer.Option(help="Keep reading new records as they come.")] = False,
    limit: Annotated[int | None, typer.Option(help="Stop after this many records.", min=1)] = None,
    gaps: Annotated[
        bool, typer.Option(help="Show gaps (trim, bridge, data loss), on stderr.")
    ] = True,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Read as this consumer group: from its position, committing what was printed.",
        ),
    ] = None,
    fmt: Annotated[str | None, typer.Option("--format", "-f", help=FORMAT_HELP)] = None,
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
    """Print a log's records in LSN order, one line each (gaps on stderr); one
    JSON object a line with --json, records and gaps alike."""

    url = require_url(url)
    if follow and until != "tail":
        fail("--follow and --until exclude each other")
    if group is not None and start != "oldest":
        fail("--group reads from the group's position: leave out --from")
    if fmt is not None and as_json:
        fail("--format and --json exclude each other")
    if output is not None:
        if follow or group is not None:
            fail("--output excludes --follow and --group")
        _read_to_file(url, log, start, until, limit, gaps, output)
        return
    line = _formatter(fmt)
    with connect_client(url) as client:
        first = _start(client, log, start) if group is None else LSN_OLDEST
        if follow:
            last: int | Any = None
        elif until == "tail":
            last = TAIL
        else:
            last = _lsn_or_time(client, log, until, "--until")
        reader = client.read(log, first, last, group=group, autocommit=group is not None)
        with contextlib.closing(reader):
            _print_items(reader, log, line, gaps=gaps, as_json=as_json, follow=follow, limit=limit)


def _print_items(
    items: Iterator[Record | Gap],
    log: int,
    line: Callable[[int, Record], bytes],
    *,
    gaps: bool,
    as_json: bool,
    follow: bool,
    limit: int | None,
) -> None:
    out = sys.stdout.buffer
    count = 0
    try:
        for item in items:
            if isinstance(item, Gap):
                if not gaps:
                    continue
                if as_json:
                    out.write(json.dumps(_item_json(log, item)).encode() + b"\n")
                else:
                    lo, hi = format_lsn(item.lo), format_lsn(item.hi)
                    err_console.print(f"[yellow]gap {item.type.name} {lo}..{hi}[/]")
                continue
            if as_json:
                out.write(json.dumps(_item_json(log, item)).encode() + b"\n")
            else:
                out.write(line(log, item))
            if follow:
                out.flush()
            count += 1
            if limit is not None and count >= limit:
                break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `| head`: the reader of our output is gone
        sys.stderr.close()
    finally:
        with contextlib.suppress(BrokenPipeError):
            out.flush()


def _read_to_file(
    url: str, log: int, start: str, until: str, limit: int | None, gaps: bool, output: Path
) -> None:

    try:
        out = output.open("w", encoding="utf-8")
    except OSError as exc:
        fail(f"--output: {exc.strerror}: {output}")
    records = size = 0
    with out, connect_client(url) as client:
        first = _start(client, log, start)
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
                        extras = item.extras
                        for i in range(take):
                            rec = Record(
                                item.lsns[i],
                                item.timestamps_ms[i],
                                item.payloads[i],
                                item.keys[i],
                                None if extras is None else extras[i],
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

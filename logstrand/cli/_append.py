"""``logstrand append``: one record from the command line, or records from
stdin: each line as it arrives (text), all of it as one record
(``--binary``), records split at a byte (``--delimiter``), or each named
file as one record (``--record-per-file``).

Line mode is for text: a line that is not UTF-8, or holds a NUL byte, ends
the run (exit 2) with what to use instead, so that a binary file is never
cut at its newline bytes into records by accident.
"""

from __future__ import annotations

import codecs
import json
import queue
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..types import format_lsn
from ._common import (
    JsonOption,
    LogArg,
    UrlOption,
    connect_client,
    console,
    fail,
    print_json,
    require_url,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..client import Client

#: Records taken into one append_batch at most, and how long a batch waits
#: for the next (a file goes in whole batches, a slow pipe line by line).
STDIN_BATCH = 10_000
STDIN_LINGER_S = 0.005
#: What stdin is read in, when it is split at a delimiter.
CHUNK = 64 * 1024
HINT = (
    "to append bytes, use --binary (all of stdin as one record), --delimiter BYTE "
    "(records split at that byte, e.g. '\\0') or --record-per-file FILE..."
)


def append(
    log: LogArg,
    payload: Annotated[
        list[str] | None,
        typer.Argument(
            help="The record; '-' (or nothing) appends each line of stdin as it arrives; "
            "with --record-per-file, the files to append.",
            show_default=False,
        ),
    ] = None,
    key: Annotated[str | None, typer.Option(help="Record key (compacted logs).")] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            help="A header NAME=VALUE on every record appended (again for more), as kcat's -H.",
        ),
    ] = None,
    key_separator: Annotated[
        str | None,
        typer.Option(help="Each stdin line is KEY<SEP>PAYLOAD, split at the first SEP."),
    ] = None,
    key_field: Annotated[
        str | None,
        typer.Option(help="Each stdin line is a JSON object; its field NAME is the key."),
    ] = None,
    binary: Annotated[
        bool, typer.Option("--binary", help="All of stdin, as bytes, is one record.")
    ] = False,
    delimiter: Annotated[
        str | None,
        typer.Option(
            help="Split stdin into records at this byte, as bytes (no text check): one "
            "character or an escape such as '\\0', '\\n', '\\x1e'.",
        ),
    ] = None,
    record_per_file: Annotated[
        bool,
        typer.Option("--record-per-file", help="Each file named after LOG is one record."),
    ] = False,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Append a record, or each line of stdin as it arrives (`tail -f x | logstrand
    append 1` writes every line), and print the LSNs."""
    url = require_url(url)
    args = payload or []
    split = None if delimiter is None else _delimiter(delimiter)
    from_stdin = not record_per_file and args in ([], ["-"])
    _check(args, key, key_separator, key_field, binary, split, record_per_file, from_stdin)
    record_key = None if key is None else key.encode()
    headers = _headers(header or [])
    with connect_client(url) as client:
        if record_per_file:
            payloads = [_read_file(name) for name in args]
            n = len(payloads)
            lsns = client.append_batch(log, payloads, keys=[record_key] * n, headers=[headers] * n)
        elif not from_stdin:
            lsns = [client.append(log, args[0].encode(), key=record_key, headers=headers)]
        elif binary:
            lsns = [client.append(log, sys.stdin.buffer.read(), key=record_key, headers=headers)]
        else:
            source = _lines() if split is None else _split(split)
            lsns = _append_stream(
                client, log, source, record_key, key_separator, key_field, split is None, headers
            )
    _report(log, lsns, as_json)


def _report(log: int, lsns: list[int], as_json: bool) -> None:
    if as_json:
        print_json({"log_id": log, "lsns": lsns})
    elif not lsns:
        console.print("nothing to append")
    elif len(lsns) == 1:
        console.print(f"appended to log {log} at LSN {lsns[0]} ({format_lsn(lsns[0])})")
    else:
        console.print(
            f"appended {len(lsns)} records to log {log}: "
            f"LSNs {lsns[0]} ({format_lsn(lsns[0])}) .. {lsns[-1]} ({format_lsn(lsns[-1])})"
        )


def _check(
    args: list[str],
    key: str | None,
    key_separator: str | None,
    key_field: str | None,
    binary: bool,
    split: bytes | None,
    record_per_file: bool,
    from_stdin: bool,
) -> None:
    """The options of ``append`` that do not go together (exit 2 when some do not)."""
    if sum(x is not None for x in (key, key_separator, key_field)) > 1:
        fail("give at most one of --key, --key-separator and --key-field")
    if sum((binary, split is not None, record_per_file)) > 1:
        fail("give at most one of --binary, --delimiter and --record-per-file")
    if key_separator == "":
        fail("--key-separator must not be empty")
    if (key_separator is not None or key_field is not None) and (
        not from_stdin or binary or split is not None
    ):
        fail("--key-separator and --key-field split stdin lines, not an argument or bytes")
    if record_per_file and not args:
        fail("--record-per-file needs the files to append")
    if not record_per_file and len(args) > 1:
        fail("give one record (or --record-per-file FILE...)")
    if not from_stdin and (binary or split is not None):
        fail("--binary and --delimiter read stdin: give no record, or '-'")


def _delimiter(text: str) -> bytes:
    """``--delimiter``: one byte, as typed or as an escape."""
    try:
        value = codecs.decode(text, "unicode_escape").encode("latin-1")
    except (UnicodeError, ValueError):
        value = b""
    if len(value) != 1:
        fail(f"--delimiter: {text!r} is not one byte (e.g. ',', '\\0', '\\x1e')")
    return value


def _read_file(name: str) -> bytes:
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        fail(f"cannot read {name}: {exc.strerror or exc}")


def _lines() -> Iterator[bytes]:
    for raw in sys.stdin.buffer:
        yield raw.rstrip(b"\n").rstrip(b"\r")


def _split(delimiter: bytes) -> Iterator[bytes]:
    """Stdin cut at ``delimiter`` (a last record without one is a record too)."""
    rest = b""
    stdin = sys.stdin.buffer
    read = getattr(stdin, "read1", stdin.read)  # read1: what is there now, up to CHUNK
    while chunk := read(CHUNK):
        parts = (rest + chunk).split(delimiter)
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


def _text(line: bytes) -> bool:
    if b"\0" in line:
        return False
    try:
        line.decode()
    except UnicodeDecodeError:
        return False
    return True


def _append_stream(
    client: Client,
    log: int,
    source: Iterator[bytes],
    key: bytes | None,
    separator: str | None,
    field: str | None,
    text: bool,
    headers: list[tuple[str, bytes | None]],
) -> list[int]:
    """Each record of ``source`` as one, in order.  A thread reads them;
    each append takes those that came within ``STDIN_LINGER_S`` of each
    other (up to ``STDIN_BATCH``), so a slow pipe (``tail -f``) has each
    line appended as it comes and a file goes in large batches.  A line that
    cannot be split, or (``text``) is not text, ends the run (exit 2) after
    the records before it are appended."""
    records: queue.Queue[bytes | None] = queue.Queue(maxsize=4 * STDIN_BATCH)

    def read() -> None:
        for raw in source:
            records.put(raw)
        records.put(None)

    threading.Thread(target=read, daemon=True, name="stdin").start()
    sep = separator.encode() if separator is not None else None
    lsns: list[int] = []
    number = 0
    bad: str | None = None
    done = False
    while not done and bad is None:
        taken = [records.get()]
        while len(taken) < STDIN_BATCH and taken[-1] is not None:
            try:  # the records that follow within a few ms go in the same batch
                taken.append(records.get(timeout=STDIN_LINGER_S))
            except queue.Empty:
                break
        payloads: list[bytes] = []
        keys: list[bytes | None] = []
        for line in taken:
            if line is None:
                done = True
                break
            number += 1
            if text and not _text(line):
                bad = f"line {number} of stdin is not text (not UTF-8, or a NUL byte): {HINT}"
                break
            record_key = key
            if sep is not None:
                record_key, found, line = line.partition(sep)
                if not found:
                    bad = f"line {number} has no {separator!r} to split the key at"
                    break
            elif field is not None:
                record_key = _json_key(line, field)
                if record_key is None:
                    bad = f"line {number} is not a JSON object with a field {field!r}"
                    break
            payloads.append(line)
            keys.append(record_key)
        if payloads:
            lsns += client.append_batch(
                log, payloads, keys=keys, headers=[headers] * len(payloads) if headers else None
            )
    if bad is not None:
        if lsns:
            console.print(f"appended {len(lsns)} records to log {log} before it")
        fail(bad)
    return lsns


def _headers(given: list[str]) -> list[tuple[str, bytes | None]]:
    """``--header NAME=VALUE`` options as headers (NAME alone: a null value)."""
    out: list[tuple[str, bytes | None]] = []
    for text in given:
        name, found, value = text.partition("=")
        if not name:
            fail(f"--header {text!r}: give NAME=VALUE")
        out.append((name, value.encode() if found else None))
    return out


def _json_key(line: bytes, field: str) -> bytes | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or field not in doc:
        return None
    value = doc[field]
    return (value if isinstance(value, str) else json.dumps(value, sort_keys=True)).encode()

"""Commands on one log's records: ``logstrand trim``, ``logstrand info``,
``logstrand compact``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._units import format_bytes, format_duration_ms
from ..admin import info_doc, sequencer_doc, tier_doc
from ..errors import InvalidArgumentError, LogstrandError
from ..records import parse_log_range
from ..types import compose_lsn, format_lsn, lsn_epoch, lsn_esn, parse_lsn
from ._common import (
    EXIT_FAILED,
    JsonOption,
    LogArg,
    UrlOption,
    connect_client,
    console,
    duration_option,
    err_console,
    fail,
    open_store,
    parse_log_id,
    print_json,
    require_url,
)
from ._nodes import corrupt_text

if TYPE_CHECKING:
    from ..client import Client
    from ..epochstore import LogAttributes


def _ts(ms: int) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def trim(
    logs: Annotated[str, typer.Argument(help="A log id, or a range FIRST..LAST.")],
    to: Annotated[
        str | None, typer.Option("--to", help="Trim up to this LSN (123 or e1n5), included.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Trim every record older than this (7d, 12h, 30m)."),
    ] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Trim logs: records at or below the trim point are gone, readers get a TRIM gap.

    Give exactly one of --to and --older-than.  A trim past a log's tail is
    refused.  Nodes that are down apply the trim when they come back.  The
    records disappear at once; their disk space returns when the partitions
    holding them are dropped (every log in them trimmed past them).
    """

    if (to is None) == (older_than is None):
        fail("give exactly one of --to and --older-than")
    try:
        first, last = parse_log_range(logs)
    except InvalidArgumentError as exc:
        fail(str(exc))
    lsn = None
    if to is not None:
        try:
            lsn = parse_lsn(to)
        except ValueError as exc:
            fail(f"--to: {exc}")
        if lsn_epoch(lsn) == 0:
            # A bare small number is an LSN of epoch 0, where no record is.
            fail(
                f"--to {to} is LSN {format_lsn(lsn)}, before every record (epochs start "
                f"at 1): give an LSN as e1n{lsn_esn(lsn)} or as its number "
                f"{compose_lsn(1, lsn_esn(lsn))} (`logstrand info` shows the head and tail)"
            )
    age_ms = duration_option(older_than, "--older-than")
    ids = range(first, last + 1)
    with connect_client(require_url(url)) as client:
        results = _trim_each(client, ids, lsn, age_ms, quiet=as_json)
    failed = sum("error" in r for r in results)
    if as_json:
        print_json(results)
    else:
        untouched = []
        for r in results:
            if "error" in r:
                err_console.print(f"[red]log {r['log_id']}:[/] {r['error']}", highlight=False)
            elif r["trimmed"]:
                console.print(f"log {r['log_id']}: trimmed to {format_lsn(r['trim_point'])}")
            else:
                untouched.append(r)
        # A line per log that did not move would bury the ones that did
        # (`trim 1..100 --older-than 7d` on a young cluster: 100 such lines).
        if len(untouched) == 1 and len(results) == 1:
            r = untouched[0]
            why = f"nothing older than {older_than}" if older_than else "already trimmed there"
            console.print(f"log {r['log_id']}: {why} (trim point {format_lsn(r['trim_point'])})")
        elif untouched:
            why = (
                f"had nothing older than {older_than}"
                if older_than
                else "were trimmed there already"
            )
            console.print(f"{len(untouched)} of {len(results)} logs {why}: unchanged")
    if failed:
        raise typer.Exit(EXIT_FAILED)


def _trim_each(
    client: Client, ids: range, lsn: int | None, age_ms: int | None, *, quiet: bool
) -> list[dict[str, Any]]:
    """Trim each log (to ``lsn``, or past its records older than ``age_ms``),
    with a progress bar for many; one result each (an error for a log that
    failed, when there are several)."""
    results: list[dict[str, Any]] = []
    with Progress(
        TextColumn("trimming"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=len(ids) < 5 or quiet,
    ) as progress:
        task = progress.add_task("trim", total=len(ids))
        for log in ids:
            try:
                before = client.trim_point(log)
                if age_ms is not None:
                    cutoff = int(time.time() * 1000) - age_ms
                    # The first record to keep (past the tail if none is that
                    # recent); when it is the log's first record, nothing is
                    # older (a trim to just before it would remove nothing and
                    # still read as a trim).
                    keep = client.find_time(log, cutoff)
                    target = keep - 1 if keep > client.find_time(log, 0) else before
                else:
                    assert lsn is not None
                    target = lsn
                point = client.trim(log, target) if target > before else before
                results.append({"log_id": log, "trim_point": point, "trimmed": point > before})
            except LogstrandError as exc:
                if len(ids) == 1:
                    raise
                results.append({"log_id": log, "error": str(exc.args[0])})
            progress.advance(task)
    return results


def _recovery_text(seq: dict[str, Any] | None) -> str:
    if seq is None:
        return "- (the sequencer did not answer)"
    if seq["recovered"]:
        return f"done (epoch {seq['epoch']} releases its records)"
    text = (
        f"in progress for {seq['recovering_s']:.1f} s, "
        f"{seq['recovery_attempts_failed']} attempts failed"
    )
    if seq["recovery_error"]:
        text += f" (last: {seq['recovery_error']})"
    if seq["stalled"]:
        text = f"[red]STALLED[/]: {text}; appends are refused until it finishes"
    return text


def _info_rows(
    doc: dict[str, Any], attributes: LogAttributes, answered: int
) -> list[tuple[str, str]]:
    """``info``'s table, row by row."""
    retention = attributes.retention_ms
    rows = [
        ("head (trim point)", format_lsn(doc["head"])),
        ("tail", format_lsn(doc["tail"])),
        ("epoch", f"{doc['epoch']} (last clean {doc['last_clean_epoch']})"),
        ("sequencer", "-" if doc["sequencer_node"] is None else f"node {doc['sequencer_node']}"),
        ("recovery", _recovery_text(doc["sequencer"])),
        ("nodeset", " ".join(str(n) for n in doc["nodeset"]) or "-"),
        ("replication", f"{attributes.replication_factor} across {attributes.replicate_across}"),
        ("retention", "forever" if retention is None else format_duration_ms(retention)),
        ("cleanup", attributes.cleanup_policy),
        ("records", f"~{doc['records_approx']:,} (approximate)"),
        ("bytes", f"~{format_bytes(doc['bytes_approx'])} (approximate)"),
        ("oldest", _ts(doc["oldest_timestamp_ms"])),
        ("newest", _ts(doc["newest_timestamp_ms"])),
        ("nodes answering", f"{answered} of {len(doc['nodeset'])}"),
        ("corrupt copies", corrupt_text(doc["corrupt_copies"])),
    ]
    if "tier" in doc:
        t = doc["tier"]
        rows.append(
            (
                "tiered",
                f"up to {format_lsn(t['tiered_point'])} in {t['objects']} objects, "
                f"{format_bytes(t['tiered_bytes'])} ({t['tiered_records']:,} records), "
                f"after {format_duration_ms(t['tier_after_ms'])}",
            )
        )
    if "compaction" in doc:
        c = doc["compaction"]
        last = c["last_pass"]
        rows += [
            ("clean point", format_lsn(c["clean_point"])),
            ("dirty ratio", f"{c['dirty_ratio']:.2f} (cleans above {c['min_cleanable_ratio']})"),
            (
                "last pass",
                "never"
                if not last
                else f"{last['records_read']:,} read, {last['records_removed']:,} removed, "
                f"{last['keys']:,} keys, {last['seconds']:.2f}s ({c['passes']} passes)",
            ),
        ]
    return rows


def info(
    log: LogArg,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """A log at a glance: head and tail, epoch and sequencer, placement, size, times."""

    with open_store(url) as store:
        attributes = store.log_attributes(log)  # NotFoundError for an unknown log
        epochs = store.log_epochs(log)
        lce = store.last_clean_epoch(log)
        alive = store.alive_nodes()
        compaction = store.compaction(log) if attributes.compacted else None
        tiered = store.tier_state(log) if attributes.tier_after_ms is not None else None
    with connect_client(require_url(url)) as client:
        tail = client.tail_lsn(log)
        infos = client.log_info(log)
        sequencer = client.sequencer_node(log)
        seq_state = client.sequencer_state(log)
    doc = info_doc(log, attributes, epochs, lce, alive, compaction, tail, infos, sequencer)
    doc["sequencer"] = sequencer_doc(seq_state)
    if tiered is not None:
        doc["tier"] = tier_doc(attributes, *tiered)
    if as_json:
        print_json(doc)
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for k, v in _info_rows(doc, attributes, len(infos)):
        table.add_row(k, v)
    console.print(table)


def compact(
    log: Annotated[
        int, typer.Argument(help="Log id (a compacted log).", parser=parse_log_id, metavar="LOG")
    ],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a compaction pass of a compacted log now, wait for it, and print what it did."""

    log_id = log
    with connect_client(require_url(url)) as client:
        stats = client.compact(log_id)
    if as_json:
        print_json(stats)
        return
    console.print(
        f"log {log_id}: clean point {format_lsn(stats['clean_point_before'])} -> "
        f"{format_lsn(stats['clean_point'])}; {stats['records_read']:,} records read, "
        f"{stats['records_removed']:,} removed ({format_bytes(stats['bytes_removed'])}), "
        f"{stats['keys']:,} keys in a {format_bytes(stats['map_bytes'])} map "
        f"({stats['map_fill']:.0%} full{', partial pass' if stats['partial'] else ''}), "
        f"{stats['seconds']:.2f}s",
        highlight=False,
    )

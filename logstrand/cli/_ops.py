"""Operator commands: ``logstrand trim``, ``logstrand info``, ``logstrand status``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._units import format_bytes, format_duration_ms
from ..epochstore import describe_offset, parse_log_range
from ..errors import InvalidArgumentError, LogstrandError, Status
from ..types import format_lsn, parse_lsn
from ..wire import NodeStatus, SeqState
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
from ._rebuild import rebuilding_doc


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
    age_ms = duration_option(older_than, "--older-than")
    results: list[dict[str, Any]] = []
    failed = 0
    with connect_client(require_url(url)) as client:
        ids = range(first, last + 1)
        with Progress(
            TextColumn("trimming"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
            disable=len(ids) < 5 or as_json,
        ) as progress:
            task = progress.add_task("trim", total=len(ids))
            for log in ids:
                try:
                    if age_ms is not None:
                        cutoff = int(time.time() * 1000) - age_ms
                        # The first record to keep (past the tail if none is that recent).
                        target = client.find_time(log, cutoff) - 1
                    else:
                        assert lsn is not None
                        target = lsn
                    point = client.trim(log, target) if target else client.trim_point(log)
                    results.append({"log_id": log, "trim_point": point})
                except LogstrandError as exc:
                    if len(ids) == 1:
                        raise
                    failed += 1
                    results.append({"log_id": log, "error": str(exc.args[0])})
                progress.advance(task)
    if as_json:
        print_json(results)
    else:
        for r in results:
            if "error" in r:
                err_console.print(f"[red]log {r['log_id']}:[/] {r['error']}", highlight=False)
            else:
                console.print(f"log {r['log_id']}: trimmed to {format_lsn(r['trim_point'])}")
    if failed:
        raise typer.Exit(EXIT_FAILED)


def _sequencer_doc(state: SeqState | None) -> dict[str, Any] | None:
    if state is None or state.status != Status.OK:
        return None
    return {
        "epoch": state.epoch,
        "recovered": state.recovered,
        "recovering_s": round(state.recovering_ms / 1000, 3),
        "stalled": state.stalled,
        "recovery_attempts_failed": state.attempts_failed,
        "recovery_error": state.error,
    }


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
    with connect_client(require_url(url)) as client:
        tail = client.tail_lsn(log)
        infos = client.log_info(log)
        sequencer = client.sequencer_node(log)
        seq_state = client.sequencer_state(log)
    current = epochs.current
    nodeset = list(current.nodeset) if current else []
    copies = max(1, attributes.replication_factor)
    head = max((i.trim_point for i in infos), default=0)
    doc: dict[str, Any] = {
        "log_id": log,
        "head": head,
        "tail": tail,
        "epoch": epochs.next_epoch - 1,
        "last_clean_epoch": lce,
        "sequencer_node": sequencer,
        "sequencer": _sequencer_doc(seq_state),
        "nodeset": nodeset,
        "replication_factor": attributes.replication_factor,
        "replicate_across": attributes.replicate_across,
        "retention_ms": attributes.retention_ms,
        "cleanup_policy": attributes.cleanup_policy,
        # Every node counts its copies: divided by R, and approximate.
        "records_approx": sum(i.records for i in infos) // copies,
        "bytes_approx": sum(i.bytes for i in infos) // copies,
        "oldest_timestamp_ms": min(
            (i.first_timestamp_ms for i in infos if i.first_timestamp_ms), default=0
        ),
        "newest_timestamp_ms": max((i.last_timestamp_ms for i in infos), default=0),
        "nodes_answered": len(infos),
        "nodes_alive": [n for n in nodeset if n in alive],
        # Ranges of copies the nodes found unreadable (a checksum failed) since they started.
        "corrupt_copies": sum(i.corrupt_copies for i in infos),
    }
    if attributes.compacted:
        state = compaction or {}
        total = doc["bytes_approx"]
        clean = int(state.get("clean_bytes", 0))
        doc["compaction"] = {
            "clean_point": int(state.get("clean_point", 0)),
            "dirty_ratio": round(max(0, total - clean) / total, 3) if total else 0.0,
            "min_cleanable_ratio": attributes.min_cleanable_ratio,
            "passes": int(state.get("passes", 0)),
            "last_pass": state.get("last_pass"),
        }
    if as_json:
        print_json(doc)
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    retention = attributes.retention_ms
    rows = [
        ("head (trim point)", format_lsn(head)),
        ("tail", format_lsn(tail)),
        ("epoch", f"{doc['epoch']} (last clean {lce})"),
        ("sequencer", "-" if sequencer is None else f"node {sequencer}"),
        ("recovery", _recovery_text(doc["sequencer"])),
        ("nodeset", " ".join(str(n) for n in doc["nodeset"]) or "-"),
        ("replication", f"{attributes.replication_factor} across {attributes.replicate_across}"),
        ("retention", "forever" if retention is None else format_duration_ms(retention)),
        ("cleanup", attributes.cleanup_policy),
        ("records", f"~{doc['records_approx']:,} (approximate)"),
        ("bytes", f"~{format_bytes(doc['bytes_approx'])} (approximate)"),
        ("oldest", _ts(doc["oldest_timestamp_ms"])),
        ("newest", _ts(doc["newest_timestamp_ms"])),
        ("nodes answering", f"{len(infos)} of {len(doc['nodeset'])}"),
        ("corrupt copies", _corrupt(doc["corrupt_copies"])),
    ]
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
    for k, v in rows:
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


def status(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Every node: address, state (alive, dead, unreachable, or "no space": alive
    but below its --min-free floor, serving reads only), its authoritative
    status (storage_state: FULLY_AUTHORITATIVE, UNAVAILABLE, REBUILDING,
    UNDERREPLICATION, AUTHORITATIVE_EMPTY), the logs it sequences, partitions,
    disk used and free, and ranges of corrupt copies it found; then the
    rebuilding under way, per donor (records and bytes re-created).

    Exits with 1 when a node is not alive (dead, or alive in the membership but
    not answering).
    """

    with open_store(url) as store:
        nodes = store.nodes()
        members = store.members()
        alive = frozenset(members)
        store_url = store.url
        rebuilding = rebuilding_doc(store, alive)
    rows: list[dict[str, Any]] = []
    with connect_client(require_url(url)) as client:
        for node_id, cfg in sorted(nodes.items()):
            st = client.node_status(node_id) if node_id in alive else None
            rows.append(
                {
                    "node_id": node_id,
                    "address": f"{cfg.host}:{cfg.port}",
                    "location": cfg.location,
                    "state": _state(st is not None, node_id in alive, st),
                    "clock_offset_ms": m.clock_offset_ms if (m := members.get(node_id)) else None,
                    "takes_sequencers": m.sequencer if m else None,
                    "why_not": m.why if m and not m.sequencer else None,
                    "storage_state": rebuilding["storage_state"].get(node_id),
                    "sequencing": list(st.sequencing) if st else [],
                    "partitions": st.partitions if st else None,
                    "disk_bytes": st.disk_bytes if st else None,
                    "logs": st.logs if st else None,
                    "uptime_s": st.uptime_s if st else None,
                    "corrupt_copies": st.corrupt_copies if st else None,
                    "free_bytes": st.free_bytes if st else None,
                    "space_low": bool(st.space_low) if st else None,
                }
            )
    unhealthy = any(r["state"] not in ("alive", "no space") for r in rows)
    if as_json:
        print_json({"epoch_store": store_url, "nodes": rows, **rebuilding})
        if unhealthy:
            raise typer.Exit(EXIT_FAILED)
        return
    console.print(f"epoch store: {store_url}", highlight=False)
    table = Table()
    cols = ("node", "address", "location", "state", "storage", "sequences", "clock", "partitions")
    for col in (*cols, "disk", "free", "corrupt copies"):
        # Addresses and locations whole, however narrow the terminal: the
        # other columns wrap instead.
        widest = max((len(r[col] or "") for r in rows), default=0) if col in _WHOLE else 0
        table.add_column(col, min_width=widest or None, no_wrap=col in _WHOLE)
    for r in rows:
        state = r["state"]
        colour = {"alive": "green", "dead": "red"}.get(state, "yellow")
        table.add_row(
            str(r["node_id"]),
            r["address"],
            r["location"] or "-",
            f"[{colour}]{state}[/]",
            _storage(r["storage_state"]),
            _sequences(r),
            _clock(r["clock_offset_ms"]),
            "-" if r["partitions"] is None else str(r["partitions"]),
            "-" if r["disk_bytes"] is None else format_bytes(r["disk_bytes"]),
            "-" if r["free_bytes"] is None else format_bytes(r["free_bytes"]),
            "-" if r["corrupt_copies"] is None else _corrupt(r["corrupt_copies"]),
        )
    console.print(table)
    _print_rebuilding(rebuilding)
    if unhealthy:
        raise typer.Exit(EXIT_FAILED)


_WHOLE = ("address", "location")


def _storage(state: str | None) -> str:
    short = {
        "FULLY_AUTHORITATIVE": "[green]full[/]",
        "UNAVAILABLE": "[red]unavailable[/]",
        "REBUILDING": "[yellow]rebuilding[/]",
        "UNDERREPLICATION": "[red]underreplicated[/]",
        "AUTHORITATIVE_EMPTY": "empty",
    }
    return "-" if state is None else short.get(state, state)


def _print_rebuilding(doc: dict[str, Any]) -> None:
    run = doc["rebuilding"]
    if run is None:
        return
    what = ", ".join(f"{n} ({run['modes'].get(str(n), '?')})" for n in run["nodes"])
    console.print(
        f"rebuilding {run['id']} of nodes {what}: {run['donors_done']}/{len(run['donors'])} "
        f"donors done, {run['records']:,} records, {format_bytes(run['bytes'])}",
        highlight=False,
    )
    for donor, p in sorted(run["per_donor"].items(), key=lambda kv: int(kv[0])):
        console.print(
            f"  donor {donor}: {'done' if p['done'] else 'working'}, {p['records']:,} records, "
            f"{format_bytes(p['bytes'])}",
            highlight=False,
        )


def _corrupt(ranges: int) -> str:
    """Ranges of unreadable copies a node reported since it started (red when any)."""
    return f"[red]{ranges}[/]" if ranges else "0"


def _state(answered: bool, member: bool, st: NodeStatus | None = None) -> str:
    if answered:
        # Alive but below its free-space floor: it serves reads, takes no STOREs.
        return "no space" if st is not None and st.space_low else "alive"
    # In the membership but silent: stopped, overloaded, or just dying.
    return "unreachable" if member else "dead"


def _sequences(row: dict[str, Any]) -> str:
    """The logs a node sequences, or why it takes no sequencers."""
    if not row["why_not"]:
        return _ids(row["sequencing"])
    now = f"{_ids(row['sequencing'])}; " if row["sequencing"] else ""
    return f"[yellow]{now}takes none: {row['why_not']}[/]"


def _clock(offset_ms: int | None) -> str:
    """A node's clock against the cluster's (yellow past a second)."""
    if offset_ms is None:
        return "-"
    text = describe_offset(offset_ms) if abs(offset_ms) >= 1000 else "ok"
    return f"[yellow]{text}[/]" if abs(offset_ms) >= 1000 else text


def _ids(ids: list[int]) -> str:
    if not ids:
        return "-"
    if len(ids) > 8:
        return " ".join(str(i) for i in ids[:8]) + f" … ({len(ids)})"
    return " ".join(str(i) for i in ids)

"""What the console shows, gathered through the client: the cluster's status,
the logs page by page, one log, consumer groups, rebuilding.  Each function
answers one GET of the HTTP API (``_routes``) with a JSON document.

Nothing here walks every log: status asks each node once, the log list
pages over the configured ranges (ids are computed, not enumerated), and a
group's lag asks the tails of its logs in one round per node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ..admin import info_doc, rebuilding_doc, sequencer_doc, status_row, tier_doc
from ..errors import InvalidArgumentError
from ..positions import records_between
from ..records import INTERNAL_LOGS, LOG_ID_MAX
from ..types import format_lsn
from ._http import parse_int
from ._scrape import node_counters

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..client import AsyncClient
    from ..epochstore import EpochStore, LogRange
    from ..wire import NodeStatus

#: A node's status answer is waited for this long (it is then shown as
#: not answering): one slow node must not hold the overview.
NODE_TIMEOUT_S = 1.5
PAGE_MAX = 1000


async def cluster_status(client: AsyncClient) -> dict[str, Any]:
    """Every node as ``logstrand status --json`` shows it, with its console and
    metrics addresses and its counters (the page turns them into rates)."""

    def from_store(store: EpochStore) -> tuple[Any, ...]:
        members = store.members()
        return store.nodes(), members, rebuilding_doc(store, frozenset(members)), store.url

    nodes, members, rebuilding, store_url = await client.view.astore.run(from_store)
    await client.view.refresh()  # the ranges, as the epoch store has them now
    alive = frozenset(members)
    answers: dict[int, NodeStatus | None] = {}
    counters: dict[int, dict[str, float] | None] = {}

    async def ask(node_id: int) -> None:
        with trio.move_on_after(NODE_TIMEOUT_S):
            answers[node_id] = await client.node_status(node_id)
        cfg = nodes[node_id]
        if cfg.metrics_port:
            counters[node_id] = await node_counters(cfg.host, cfg.metrics_port, NODE_TIMEOUT_S)

    async with trio.open_nursery() as nursery:
        for node_id in sorted(nodes):
            if node_id in alive:
                nursery.start_soon(ask, node_id)
    rows = []
    for node_id, cfg in sorted(nodes.items()):
        st = answers.get(node_id)
        storage = rebuilding["storage_state"].get(node_id)
        row = status_row(node_id, cfg, st, members.get(node_id), alive, storage)
        row["roles"] = list(cfg.roles)
        row["metrics"] = f"{cfg.host}:{cfg.metrics_port}" if cfg.metrics_port else None
        row["counters"] = counters.get(node_id)
        rows.append(row)
    ranges = [r for r in client.view.ranges if not _internal(r)]
    return {
        "epoch_store": store_url,
        "nodes": rows,
        **rebuilding,
        "log_ranges": len(ranges),
        "logs": sum(r.last - r.first + 1 for r in ranges),
    }


def _internal(r: LogRange) -> bool:
    return r.first in INTERNAL_LOGS


def _range_doc(r: LogRange) -> dict[str, Any]:
    a = r.attributes
    return {
        "first": r.first,
        "last": r.last,
        "name": r.name,
        "replication_factor": a.replication_factor,
        "cleanup_policy": a.cleanup_policy,
        "retention_ms": a.retention_ms,
        "compression": a.compression,
    }


def ranges_doc(ranges: list[LogRange]) -> dict[str, Any]:
    """Every range of user logs in id order, with all its attributes."""
    user = sorted((r for r in ranges if not _internal(r)), key=lambda r: r.first)
    return {"ranges": [{**_range_doc(r), "attributes": r.attributes.to_json()} for r in user]}


def list_logs(ranges: list[LogRange], q: str, offset: int, limit: int) -> dict[str, Any]:
    """A page of the logs that match ``q`` (a log id, a range ``A..B``, or part
    of a range's name; empty: every user log), in id order.  Computed from the
    ranges: a page of 100,000 logs costs what a page of ten does."""
    if not 1 <= limit <= PAGE_MAX:
        raise InvalidArgumentError(f"limit must be between 1 and {PAGE_MAX}")
    spans = _matching(sorted((r for r in ranges if not _internal(r)), key=lambda r: r.first), q)
    total = sum(hi - lo + 1 for _, lo, hi in spans)
    logs: list[dict[str, Any]] = []
    skip = offset
    for r, lo, hi in spans:
        n = hi - lo + 1
        if skip >= n:
            skip -= n
            continue
        start = lo + skip
        skip = 0
        for log_id in range(start, min(hi, start + limit - len(logs) - 1) + 1):
            logs.append({"log_id": log_id, "range": _range_doc(r)})
        if len(logs) >= limit:
            break
    return {"query": q, "total": total, "offset": offset, "limit": limit, "logs": logs}


def _matching(ranges: list[LogRange], q: str) -> list[tuple[LogRange, int, int]]:
    q = q.strip()
    if not q:
        return [(r, r.first, r.last) for r in ranges]
    lo, hi = _id_span(q)
    if lo is not None and hi is not None:
        out = []
        for r in ranges:
            a, b = max(lo, r.first), min(hi, r.last)
            if a <= b:
                out.append((r, a, b))
        return out
    needle = q.lower()
    return [(r, r.first, r.last) for r in ranges if r.name and needle in r.name.lower()]


def _id_span(q: str) -> tuple[int | None, int | None]:
    first, sep, last = q.partition("..")
    if first.isdigit() and (not sep or last.isdigit()):
        return int(first), int(last if sep else first)
    return None, None


async def log_doc(client: AsyncClient, log_id: int) -> dict[str, Any]:
    """``logstrand info --json`` of one log, with its range, attributes and
    placement history (the epochs and their nodesets)."""

    def from_store(store: EpochStore) -> tuple[Any, ...]:
        return (
            store.log_range(log_id),
            store.log_epochs(log_id),
            store.last_clean_epoch(log_id),
            store.alive_nodes(),
            store.compaction(log_id) if store.log_attributes(log_id).compacted else None,
            store.tier_state(log_id)
            if store.log_attributes(log_id).tier_after_ms is not None
            else None,
        )

    rng, epochs, lce, alive, compaction, tiered = await client.view.astore.run(from_store)
    tail = await client.tail_lsn(log_id)
    infos = await client.log_info(log_id)
    sequencer = client.sequencer_node(log_id)
    seq_state = None
    with trio.move_on_after(NODE_TIMEOUT_S):
        seq_state = await client.sequencer_state(log_id)
    doc = info_doc(log_id, rng.attributes, epochs, lce, alive, compaction, tail, infos, sequencer)
    doc["sequencer"] = sequencer_doc(seq_state)
    if tiered is not None:
        doc["tier"] = tier_doc(rng.attributes, *tiered)
    doc["head_text"], doc["tail_text"] = format_lsn(doc["head"]), format_lsn(tail)
    doc["range"] = _range_doc(rng)
    doc["attributes"] = rng.attributes.to_json()
    doc["epochs"] = [e.to_json() for e in epochs.history]
    return doc


async def groups_doc(client: AsyncClient, sees: Callable[[str], Awaitable[bool]]) -> dict[str, Any]:
    """Every consumer group the user ``sees``: its logs, total lag in records,
    and whether it has members (a Kafka group) — one round of tails for all
    their logs."""
    positions = {g: ps for g, ps in (await client.group_positions()).items() if await sees(g)}
    logs = sorted({p.log_id for ps in positions.values() for p in ps})
    tails = await client.tail_lsns(logs) if logs else {}
    groups = []
    for name, ps in sorted(positions.items()):
        # Exact within an epoch; across epochs the tail's ESNs (the group
        # page asks for the epochs' ends: ``describe_group``).
        behind = [records_between(p.lsn, tails.get(p.log_id, 0), {}) for p in ps]
        groups.append(
            {
                "group": name,
                "logs": len(ps),
                "lag_records": sum(behind),
                "behind_logs": sum(1 for b in behind if b),
            }
        )
    return {"groups": groups}


async def group_doc(client: AsyncClient, group: str) -> dict[str, Any]:
    lags = await client.describe_group(group)
    membership = await client.group_membership(group)
    rows = []
    for lag in lags:
        row = lag.to_json()
        row["committed_text"] = None if lag.committed is None else format_lsn(lag.committed)
        row["tail_text"] = format_lsn(lag.tail)
        rows.append(row)
    return {
        "group": group,
        "logs": rows,
        "lag_records": sum(r["lag_records"] for r in rows),
        "membership": membership,
    }


def parse_log_id(text: str) -> int:
    """A log id in a path: 1 to 2^63-1 in ASCII digits (a 400 otherwise)."""
    return parse_int(text, "log", 1, LOG_ID_MAX)

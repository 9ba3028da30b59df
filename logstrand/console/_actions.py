"""The console's actions: trim a log, reset a group's position, drain and
undrain a node, create and change logs.  The risky ones take ``dry_run``
and then say what would happen without doing it; the page shows that
answer in its confirmation before it sends the same request for real.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._units import parse_duration_ms
from ..epochstore import LogAttributes
from ..errors import InvalidArgumentError
from ..rebuilding import Mode
from ..records import LOG_ID_MAX
from ..types import format_lsn, lsn_value
from ._records import TIME_MS_MAX

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import EpochStore


def flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be true or false")
    return value


async def trim(client: AsyncClient, log_id: int, body: dict[str, Any]) -> dict[str, Any]:
    """Trim ``log_id`` up to ``to`` (an LSN, included) or everything older
    than ``older_than`` (a duration: 7d, 12h); with ``dry_run``, only what
    would go: the new head and the records and bytes below it (approximate,
    from the nodes' partition directories)."""
    dry_run = flag(body, "dry_run")
    if ("to" in body) == ("older_than" in body):
        raise InvalidArgumentError("give one of to (an LSN) or older_than (a duration)")
    if "to" in body:
        target = lsn_value(body["to"], "to")
    else:
        if not isinstance(body["older_than"], str):
            raise InvalidArgumentError("older_than must be a duration such as 7d or 30m")
        try:
            age_ms = parse_duration_ms(body["older_than"])
        except ValueError as exc:
            raise InvalidArgumentError(f"older_than: {exc}") from None
        cutoff = max(0, int(time.time() * 1000) - age_ms)
        target = await client.find_time(log_id, cutoff) - 1
    head = await client.trim_point(log_id)
    tail = await client.tail_lsn(log_id)
    if target > tail:
        raise InvalidArgumentError(
            f"cannot trim log {log_id} to {format_lsn(target)}: its tail is {format_lsn(tail)}"
        )
    records, size = await _below(client, log_id, head, target)
    doc: dict[str, Any] = {
        "log_id": log_id,
        "dry_run": dry_run,
        "head_before": head,
        "head_before_text": format_lsn(head),
        "head": max(head, target),
        "head_text": format_lsn(max(head, target)),
        "records_approx": records,
        "bytes_approx": size,
    }
    if not dry_run and target > head:
        doc["head"] = await client.trim(log_id, target)
        doc["head_text"] = format_lsn(doc["head"])
    return doc


async def _below(client: AsyncClient, log_id: int, head: int, target: int) -> tuple[int, int]:
    """About how many records (and bytes) lie in ``(head, target]``: the
    partitions wholly inside count whole, one cut by ``target`` by its share
    of LSNs; every record is held R times, so each node's part is divided."""
    if target <= head:
        return 0, 0
    attributes = await client.log_attributes(log_id)
    copies = max(1, attributes.replication_factor)
    records = size = 0.0
    for seg in await client.log_directory(log_id):
        lo, hi = max(seg.first_lsn, head + 1), min(seg.last_lsn, target)
        if lo > hi or seg.last_lsn < seg.first_lsn:
            continue
        share = (hi - lo + 1) / (seg.last_lsn - seg.first_lsn + 1)
        records += seg.records * share
        size += seg.bytes * share
    return round(records / copies), round(size / copies)


async def reset_group(client: AsyncClient, group: str, body: dict[str, Any]) -> dict[str, Any]:
    """Move ``group``'s position on ``log`` (``how``: lsn, time, earliest,
    latest; ``value``: the LSN or ms); with ``dry_run``, where it would go."""
    dry_run = flag(body, "dry_run")
    log = _log_id(body.get("log"), "log")
    how = body.get("how")
    if how not in ("lsn", "time", "earliest", "latest"):
        raise InvalidArgumentError("how must be one of lsn, time, earliest, latest")
    value: int | None = None
    if how == "lsn":
        value = lsn_value(body.get("value"), "value")
    elif how == "time":
        v = body.get("value")
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= TIME_MS_MAX:
            raise InvalidArgumentError("value must be milliseconds since the epoch (0 to 2^63-1)")
        value = v
    before, after = await client.reset_group(group, log, how, value, dry_run=dry_run)
    return {
        "group": group,
        "log_id": log,
        "dry_run": dry_run,
        "committed_before": before,
        "committed_before_text": None if before is None else format_lsn(before),
        "committed": after,
        "committed_text": format_lsn(after),
    }


async def drain(client: AsyncClient, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
    """Drain ``node_id`` (its copies move to other nodes while it serves); with
    ``dry_run``, its state and whether it may be drained now."""
    dry_run = flag(body, "dry_run")

    def act(store: EpochStore) -> dict[str, Any]:
        if node_id not in store.nodes():
            raise InvalidArgumentError(f"node {node_id} is not in the cluster configuration")
        alive = store.alive_nodes()
        if not dry_run:
            store.request_rebuild(node_id, Mode.DRAIN, reason="console")
        st = store.rebuilding_state()
        return {
            "node_id": node_id,
            "dry_run": dry_run,
            "storage_state": st.storage_state(node_id, node_id in alive).value,
            "draining": node_id in st.shards and st.shards[node_id].mode is Mode.DRAIN,
        }

    result: dict[str, Any] = await client.view.astore.run(act)
    return result


async def undrain(client: AsyncClient, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
    dry_run = flag(body, "dry_run")

    def act(store: EpochStore) -> dict[str, Any]:
        shard = store.rebuilding_state().shards.get(node_id)
        if shard is None or shard.mode is not Mode.DRAIN:
            raise InvalidArgumentError(f"node {node_id} is not drained or draining")
        if not dry_run:
            store.undrain(node_id)
        return {"node_id": node_id, "dry_run": dry_run, "undrained": not dry_run}

    result: dict[str, Any] = await client.view.astore.run(act)
    return result


async def create_logs(client: AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create logs ``first..last`` with ``attributes`` (as ``logs create``)
    and an optional ``name``."""
    first = _log_id(body.get("first"), "first")
    last = _log_id(body.get("last", body.get("first")), "last")
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError("name must be a string")
    attributes = LogAttributes.from_json(_object(body.get("attributes", {}), "attributes"))
    rng = await client.view.astore.run(lambda s: s.create_logs(first, last, attributes, name=name))
    await client.view.refresh()
    return {"range": rng.to_json()}


async def update_logs(client: AsyncClient, first: int, body: dict[str, Any]) -> dict[str, Any]:
    """Change attributes of the range that starts at ``first``."""
    changes = _object(body.get("attributes", {}), "attributes")
    LogAttributes.from_json(changes)  # unknown names and bad values: refused here
    rng = await client.view.astore.run(lambda s: s.log_range(first))
    if rng.first != first:
        raise InvalidArgumentError(f"log {first} is inside range {rng.first}..{rng.last}")
    new = await client.view.astore.run(lambda s: s.update_logs(rng.first, rng.last, **changes))
    await client.view.refresh()
    return {"range": new.to_json()}


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{what} must be a JSON object")
    return value


def _log_id(value: Any, what: str) -> int:
    """A user log's id in a JSON body (1 to 2^63-1; the top bit is the
    internal logs')."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LOG_ID_MAX:
        raise InvalidArgumentError(f"{what} must be a log id from 1 to {LOG_ID_MAX}")
    return value

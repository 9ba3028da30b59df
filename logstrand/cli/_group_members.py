"""What ``groups describe`` shows of a group's membership, Kafka consumers'
or ``client.subscribe``'s: the members, the logs assigned to each, and
Kafka offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from ..groups import assigned_partitions, spans_logs
from ..kafka._offsets import OffsetMap

if TYPE_CHECKING:
    from ..epochstore import EpochStore, LogRange


def _assigned(member: dict[str, Any]) -> list[tuple[str, int]]:
    """(topic, partition) of a member of either protocol's record."""
    if "given" in member:  # a consumer-protocol group (KIP-848)
        return [(t, int(p)) for t, p in member["given"]]
    raw = bytes.fromhex(member.get("assignment", ""))
    return [(t, p) for t, ps in assigned_partitions(raw).items() for p in ps]


def _subscribed(membership: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """A ``client.subscribe`` group's subscriptions: topic -> its logs (once
    per record, not per member)."""
    return {t: spans_logs(spans) for t, spans in membership.get("logs", {}).items()}


def _member_logs(
    member: dict[str, Any], subscribed: dict[str, tuple[int, ...]], first: dict[str, int]
) -> list[int]:
    """The logs assigned to a member: a topic's partition ``p`` is log
    ``first + p`` of its range; a subscription to logs has its logs in
    ``subscribed``."""
    out = []
    for topic, p in _assigned(member):
        if topic in subscribed and 0 <= p < len(subscribed[topic]):
            out.append(subscribed[topic][p])
        elif topic in first:
            out.append(first[topic] + p)
    return sorted(out)


def members_by_log(membership: dict[str, Any] | None, ranges: list[LogRange]) -> dict[int, str]:
    """Log id -> the member it is assigned to."""
    if membership is None:
        return {}
    first = {r.name: r.first for r in ranges if r.name is not None}
    subscribed = _subscribed(membership)
    return {
        log: m["id"]
        for m in membership.get("members", [])
        for log in _member_logs(m, subscribed, first)
    }


def kafka_end_offset(store: EpochStore, log_id: int, tail: int) -> int:
    """The log's Kafka log end offset (high watermark), from its tail LSN."""
    m = OffsetMap(tuple(store.offset_bases(log_id)), store.last_clean_epoch(log_id))
    return m.next_offset(tail)


def members_table(membership: dict[str, Any]) -> Table:
    subscribed = _subscribed(membership)
    kind = "consumer" if membership.get("type") == "consumer" else "classic"
    epoch = membership.get("epoch", membership.get("generation"))
    table = Table(
        "member",
        "instance",
        "client",
        "host",
        "logs" if subscribed else "partitions",
        title=f"{kind} group, {'epoch' if kind == 'consumer' else 'generation'} {epoch}",
    )
    for m in membership.get("members", []):
        if subscribed:
            parts = ", ".join(map(str, _member_logs(m, subscribed, {})))
        else:
            parts = ", ".join(f"{t}:{p}" for t, p in sorted(_assigned(m)))
        table.add_row(
            m["id"], m.get("instance") or "-", m.get("client", ""), m.get("host", ""), parts or "-"
        )
    return table

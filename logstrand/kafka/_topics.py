"""Kafka topics as named log ranges: ids, configs, free ranges.  Pure.

Topic ``orders`` partition *i* is log ``first + i`` of the range named
``orders``.  A topic's configs are the range's attributes under Kafka's
names (``TOPIC_CONFIGS``); a config logstrand has no attribute for is
refused with INVALID_CONFIG rather than taken and ignored.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import attrs

from ..epochstore._model import LogAttributes
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ..epochstore._model import LogRange
    from ..epochstore._named import NamedLogs

_NAMESPACE = uuid.UUID("5b0a5f1e-3a52-4f59-9d0c-6c6f6773747a")


def topic_id(cluster: str, r: NamedLogs | LogRange) -> bytes:
    """A topic's id: the same for the same name and first log (it grows
    without changing), new when it is made again."""
    return uuid.uuid5(_NAMESPACE, f"{cluster}/{r.name}/{r.first}").bytes


class ConfigError(ValueError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def _or(value: int | None, none: str) -> str:
    return none if value is None else str(value)


def _ms(value: str) -> int | None:
    n = int(value)
    return None if n < 0 else n


def _positive_or_none(value: str) -> int | None:
    n = int(value)
    return None if n < 0 else n


def _policy(value: str) -> str:
    parts = sorted(p.strip() for p in value.split(","))
    if parts == ["compact", "delete"]:
        return "compact,delete"
    if len(parts) != 1 or parts[0] not in ("compact", "delete"):
        raise ValueError("delete, compact or both")
    return parts[0]


def _codec(value: str) -> tuple[str, str | None]:
    """compression.type -> (the log's own codec, the codec of fetched
    batches where it is not the log's).  lz4 and zstd are logstrand codecs
    too: the log keeps its batches so, and the front sends them so.  gzip and
    snappy are Kafka's alone: the log keeps batches uncompressed and the
    front compresses what it sends.  ``producer`` keeps no codec (produced
    batches are stored decompressed) and sends uncompressed batches."""
    if value == "producer":
        return "none", None
    if value in ("uncompressed", "none"):
        return "none", "none"
    if value in ("lz4", "zstd"):
        return value, None
    if value in ("gzip", "snappy"):
        return "none", value
    raise ValueError("one of producer, uncompressed, gzip, snappy, lz4, zstd")


def _codec_shown(value: tuple[str, str | None]) -> str:
    log, wire = value
    if wire is None:
        return "producer" if log == "none" else log
    return "uncompressed" if wire == "none" else wire


#: Kafka config name -> (attribute or attributes, parse, render).
TOPIC_CONFIGS: dict[str, tuple[str | tuple[str, ...], Any, Any]] = {
    "retention.ms": ("retention_ms", _ms, lambda v: _or(v, "-1")),
    "retention.bytes": ("retention_bytes", _positive_or_none, lambda v: _or(v, "-1")),
    "cleanup.policy": ("cleanup_policy", _policy, str),
    "delete.retention.ms": ("delete_retention_ms", int, str),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int, str),
    "max.compaction.lag.ms": (
        "max_compaction_lag_ms",
        _positive_or_none,
        lambda v: _or(v, "9223372036854775807"),
    ),
    "min.cleanable.dirty.ratio": ("min_cleanable_ratio", float, str),
    "compression.type": (("compression", "wire_compression"), _codec, _codec_shown),
}


#: Kafka's ConfigType codes (DescribeConfigs v3+).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7

#: Kafka config name -> (its ConfigType, the broker-wide default it falls
#: back to, what it means): what DescribeConfigs shows besides the value.
TOPIC_CONFIG_INFO: dict[str, tuple[int, str, str]] = {
    "retention.ms": (LONG, "log.retention.ms", "How long a record is kept (-1: no limit)."),
    "retention.bytes": (
        LONG,
        "log.retention.bytes",
        "Bytes a partition keeps before its oldest records go (-1: no limit).",
    ),
    "cleanup.policy": (LIST, "log.cleanup.policy", "delete, compact, or both."),
    "delete.retention.ms": (
        LONG,
        "log.cleaner.delete.retention.ms",
        "How long a tombstone stays after compaction reached it.",
    ),
    "min.compaction.lag.ms": (
        LONG,
        "log.cleaner.min.compaction.lag.ms",
        "How old a record must be before compaction may remove it.",
    ),
    "max.compaction.lag.ms": (
        LONG,
        "log.cleaner.max.compaction.lag.ms",
        "How long a record may stay uncompacted at most.",
    ),
    "min.cleanable.dirty.ratio": (
        DOUBLE,
        "log.cleaner.min.cleanable.ratio",
        "The share of a log not yet compacted past which the cleaner runs.",
    ),
    "compression.type": (
        STRING,
        "compression.type",
        "The codec of the batches consumers get: producer (none), uncompressed, gzip, snappy, "
        "lz4 or zstd (lz4 and zstd also compress what the log keeps).",
    ),
}


def apply_configs(base: LogAttributes, configs: Iterable[tuple[str, str | None]]) -> LogAttributes:
    """``base`` with Kafka topic configs applied (None: back to the default)."""
    changes: dict[str, Any] = {}
    default = LogAttributes()
    for name, value in configs:
        known = TOPIC_CONFIGS.get(name)
        if known is None:
            raise ConfigError(name, "not a topic config logstrand has")
        attr, parse, _ = known
        names = attr if isinstance(attr, tuple) else (attr,)
        if value is None:
            changes.update((n, getattr(default, n)) for n in names)
            continue
        try:
            parsed = parse(value)
        except ValueError as exc:
            raise ConfigError(name, f"bad value {value!r}: {exc}") from exc
        changes.update(zip(names, parsed if isinstance(attr, tuple) else (parsed,), strict=True))
    try:
        return attrs.evolve(base, **changes)
    except (InvalidArgumentError, ValueError, TypeError) as exc:
        raise ConfigError(", ".join(n for n, _ in configs), str(exc)) from exc


def describe_configs(attributes: LogAttributes) -> list[tuple[str, str, bool, str]]:
    """(name, value, is default, the default's value) of every topic
    config, as Kafka names them."""
    default = LogAttributes()
    out = []
    for name, (attr, _, render) in sorted(TOPIC_CONFIGS.items()):
        value, was = _value(attributes, attr), _value(default, attr)
        out.append((name, render(value), value == was, render(was)))
    return out


def _value(attributes: LogAttributes, attr: str | tuple[str, ...]) -> Any:
    if isinstance(attr, tuple):
        return tuple(getattr(attributes, n) for n in attr)
    return getattr(attributes, attr)


def free_firsts(
    ranges: Iterable[LogRange], count: int, top: int, *, above: int = 0
) -> Iterator[int]:
    """First ids of runs of ``count`` ids in no range, lowest first, above
    ``above`` and below ``top``."""
    taken = sorted((r.first, r.last) for r in ranges if r.first >= 1)
    at = above + 1
    for first, last in [*taken, (top + 1, top + 1)]:
        while at + count - 1 < first:
            yield at
            at += count
        at = max(at, last + 1)

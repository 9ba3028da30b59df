"""What the epoch store keeps: value types and their JSON form.

Every type validates at construction (an invalid config cannot exist) and
converts to and from plain JSON, which is what ZooKeeper znodes and SQLite rows
hold, so an operator can read them with ``zkCli.sh`` or ``sqlite3``.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from .._units import DURATION_MS_MAX, SIZE_MAX
from ..errors import InvalidArgumentError
from ..records import INTERNAL_LOGS, LOG_ID_MAX

#: Node ids: 0 is no node (copysets and the wire use 0 for "none"), and the
#: wire carries a node id in 32 bits; 2^31 - 1 keeps it a signed int too.
NODE_ID_MIN = 1
NODE_ID_MAX = 2**31 - 1

#: Failure-domain scopes, narrowest first.  A location is "region.dc.rack".
SCOPES = ("node", "rack", "dc", "region")
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
COMPRESSIONS = ("none", "lz4", "zstd")
#: Kafka's codecs, for the batches the Kafka front sends (``wire_compression``).
WIRE_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
DURABILITIES = ("async", "fsync")
ROLES = ("storage", "sequencer")
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: A log range's name: what Kafka allows in a topic name, less names of digits
#: alone (the CLI takes a log id or a range where it takes a name).
_RANGE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,249}$")
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.-]+:[0-9]{1,5}$")


def check_cluster_name(name: str) -> str:
    if not _CLUSTER_RE.match(name):
        raise InvalidArgumentError(f"bad cluster name {name!r}: use 1-64 of A-Z a-z 0-9 _ . -")
    return name


def check_range_name(name: str) -> str:
    """A log range's name, as Kafka takes topic names (``orders``, ``a.b-c_1``)."""
    if (
        type(name) is not str
        or not _RANGE_NAME_RE.match(name)
        or name in (".", "..")
        or name.isdigit()
    ):
        raise InvalidArgumentError(
            f"bad log range name {name!r}: use 1-249 of A-Z a-z 0-9 _ . -, not digits alone"
        )
    return name


def _fail(msg: str) -> None:
    raise InvalidArgumentError(msg)


@attrs.frozen
class NodeConfig:
    """One node of the cluster."""

    node_id: int
    address: str  # host:port of the node's protocol listener
    location: str = ""  # failure-domain path "region.dc.rack"; "" = unknown
    weight: float = 1.0  # storage and sequencer weight
    roles: tuple[str, ...] = ("storage", "sequencer")
    metrics_port: int | None = None
    data_dir: str = ""
    #: host:port of its Kafka listener (``--kafka-port``), for Kafka clients.
    kafka: str | None = None
    #: Port of its console and HTTP admin API (``--http-port``), on its host.
    http_port: int | None = None

    def __attrs_post_init__(self) -> None:
        if type(self.node_id) is not int or not NODE_ID_MIN <= self.node_id <= NODE_ID_MAX:
            _fail(f"bad node id {self.node_id!r}: {NODE_ID_MIN} to {NODE_ID_MAX}")
        if not _ADDRESS_RE.match(self.address) or not 0 < int(self.address.rsplit(":")[1]) < 65536:
            _fail(f"bad node address {self.address!r}: use host:port")
        if self.kafka is not None and not _ADDRESS_RE.match(self.kafka):
            _fail(f"bad Kafka address {self.kafka!r}: use host:port")
        if self.location and len(self.location.split(".")) > len(SCOPES) - 1:
            _fail(f"bad location {self.location!r}: at most region.dc.rack")
        if not 0 <= self.weight <= 1e6:
            _fail(f"bad weight {self.weight!r}")
        if not set(self.roles) <= set(ROLES) or not self.roles:
            _fail(f"bad roles {self.roles!r}: choose from {', '.join(ROLES)}")

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def domain(self, scope: str) -> str:
        """The failure domain of this node at ``scope`` (e.g. its rack path)."""
        if scope == "node":
            return f"node{self.node_id}"
        parts = self.location.split(".") if self.location else []
        depth = {"region": 1, "dc": 2, "rack": 3}[scope]
        if len(parts) < depth:
            return f"node{self.node_id}"  # unknown location: its own domain
        return ".".join(parts[:depth])

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.address,
            "location": self.location,
            "weight": self.weight,
            "roles": list(self.roles),
            "metrics_port": self.metrics_port,
            "data_dir": self.data_dir,
            "kafka": self.kafka,
            "http_port": self.http_port,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NodeConfig:
        return cls(
            d["node_id"],
            d["address"],
            d.get("location", ""),
            float(d.get("weight", 1.0)),
            tuple(d.get("roles", ROLES)),
            d.get("metrics_port"),
            d.get("data_dir", ""),
            d.get("kafka"),
            d.get("http_port"),
        )


#: Attributes that a log's document holds only when they are set.
_LEFT_OUT_UNSET = (
    "wire_compression",
    "tier_after_ms",
    "local_retention_ms",
    "local_retention_bytes",
)


@attrs.frozen
class LogAttributes:
    """Attributes of a range of logs (LogDevice's log group attributes).
    One added after the first version goes in ``_LEFT_OUT_UNSET`` too."""

    replication_factor: int = 2
    replicate_across: str = "node"
    #: How many nodes hold the log's copies; None means every storage node.
    nodeset_size: int | None = None
    #: Backlog: records older than this are trimmed; None keeps them forever.
    retention_ms: int | None = None
    #: Backlog by space: the log keeps about this many bytes (one copy of each
    #: record), the oldest trimmed first, at partition boundaries; None: no bound.
    retention_bytes: int | None = None
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    min_cleanable_ratio: float = 0.5
    durability: str = "async"
    #: How clients compress the bodies of their batches: none, lz4 or zstd.
    compression: str = "none"
    #: The Kafka codec of the batches the Kafka front sends for the log
    #: (Kafka's compression.type, where logstrand keeps no such codec of its
    #: own: gzip, snappy; or none); None: as ``compression``.
    wire_compression: str | None = None
    #: Tiered storage (docs/tiered-storage.md): records older than this move
    #: to the object store, once released; None: the log is not tiered.
    tier_after_ms: int | None = None
    #: What of a tiered log the nodes' disks keep (the newest records): by
    #: age or by space (one copy of each record); None: everything.
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        if type(self.replication_factor) is not int or not 1 <= self.replication_factor <= 15:
            _fail(f"bad replication factor {self.replication_factor!r}: 1 to 15")
        if self.replicate_across not in SCOPES:
            _fail(f"bad replicate-across {self.replicate_across!r}: one of {', '.join(SCOPES)}")
        if self.nodeset_size is not None and not (
            type(self.nodeset_size) is int and self.replication_factor <= self.nodeset_size <= 1000
        ):
            _fail(f"bad nodeset size {self.nodeset_size!r}: at least the replication factor")
        for name in (
            "retention_ms",
            "max_compaction_lag_ms",
            "retention_bytes",
            "tier_after_ms",
            "local_retention_ms",
            "local_retention_bytes",
        ):
            v = getattr(self, name)
            top = SIZE_MAX if name.endswith("bytes") else DURATION_MS_MAX
            if v is not None and (type(v) is not int or not 0 < v <= top):
                what = name.removesuffix("_ms").replace("_", "-")
                _fail(f"bad {what} {v!r}: must be positive, at most {top}")
        for name in ("delete_retention_ms", "min_compaction_lag_ms"):
            v = getattr(self, name)
            if type(v) is not int or not 0 <= v <= DURATION_MS_MAX:
                _fail(f"bad {name.removesuffix('_ms').replace('_', '-')} {v!r}")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            _fail(f"bad cleanup policy {self.cleanup_policy!r}: {', '.join(CLEANUP_POLICIES)}")
        if not 0.0 <= self.min_cleanable_ratio <= 1.0:
            _fail(f"bad min cleanable ratio {self.min_cleanable_ratio!r}: 0 to 1")
        if self.durability not in DURABILITIES:
            _fail(f"bad durability {self.durability!r}: {', '.join(DURABILITIES)}")
        if self.compression not in COMPRESSIONS:
            _fail(f"bad compression {self.compression!r}: {', '.join(COMPRESSIONS)}")
        if self.wire_compression is not None and self.wire_compression not in WIRE_COMPRESSIONS:
            _fail(f"bad wire compression {self.wire_compression!r}: {', '.join(WIRE_COMPRESSIONS)}")

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def kafka_codec(self) -> str:
        """The codec of the batches the Kafka front sends for the log."""
        return self.wire_compression or self.compression

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        for name in _LEFT_OUT_UNSET:
            if d[name] is None:
                # Left out unless set: a node of an earlier version reads
                # the document too, and refuses attributes it does not know.
                del d[name]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LogAttributes:
        known = {a.name for a in attrs.fields(cls)}
        unknown = set(d) - known
        if unknown:
            _fail(f"unknown log attribute(s): {', '.join(sorted(unknown))}")
        return cls(**d)


@attrs.frozen
class LogRange:
    """Logs ``first..last`` (both included) sharing one set of attributes."""

    first: int
    last: int
    attributes: LogAttributes = LogAttributes()
    #: Its name (``logs create 100..115 --name orders``), as LogDevice names
    #: log groups; the Kafka front serves a named range as a topic.
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        if not (type(self.first) is int and type(self.last) is int):
            _fail("log range ends must be integers")
        if self.name is not None:
            check_range_name(self.name)
        internal = self.first in INTERNAL_LOGS and self.last in INTERNAL_LOGS
        if not 1 <= self.first <= self.last <= LOG_ID_MAX and not internal:
            _fail(f"bad log range {self.first}..{self.last}: 1 <= first <= last < 2^63")

    def __contains__(self, log_id: object) -> bool:
        return isinstance(log_id, int) and self.first <= log_id <= self.last

    def overlaps(self, other: LogRange) -> bool:
        return self.first <= other.last and other.first <= self.last

    def to_json(self) -> dict[str, Any]:
        d = {"first": self.first, "last": self.last, "attributes": self.attributes.to_json()}
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LogRange:
        return cls(d["first"], d["last"], LogAttributes.from_json(d["attributes"]), d.get("name"))


@attrs.frozen
class EpochMetadata:
    """Placement in force from epoch ``since`` on (until the next entry's ``since``)."""

    since: int
    nodeset: tuple[int, ...]
    replication_factor: int
    replicate_across: str = "node"

    def __attrs_post_init__(self) -> None:
        if self.since < 1:
            _fail("epochs start at 1")
        if len(self.nodeset) < self.replication_factor or len(set(self.nodeset)) != len(
            self.nodeset
        ):
            _fail(f"nodeset {self.nodeset} cannot hold {self.replication_factor} copies")

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "nodeset": list(self.nodeset),
            "replication_factor": self.replication_factor,
            "replicate_across": self.replicate_across,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpochMetadata:
        return cls(
            d["since"],
            tuple(d["nodeset"]),
            d["replication_factor"],
            d.get("replicate_across", "node"),
        )


@attrs.frozen
class EpochEnd:
    """How recovery ended an epoch, as storage nodes need it to serve the epoch.

    ``lng_esn``: every ESN up to here was fully stored by the epoch's own
    sequencer (any copy is good).  Above it, up to the bridge at
    ``bridge_esn``, only the copies that recovery wrote with ``seal`` (the
    epoch of the sequencer that ran it), or a later recovery wrote, are good:
    any other copy there, or above the bridge, was left by a sequencer or an
    earlier recovery that died, and a node must not hand it to readers.

    A later recovery decides as this one did: it seals the nodes it reads
    digests from, so this one could only finish its writes on nodes that
    later recovery had not sealed yet, and so reads from.
    """

    lng_esn: int
    bridge_esn: int
    seal: int
    #: The epoch's newest timestamp, when its own sequencer ended it
    #: (``sequencer._handoff``); 0 when a recovery did.  The next sequencer
    #: stamps from it without sealing (``_procedures.activate``).  Not part
    #: of what the end says about the records, so not of equality.
    last_timestamp_ms: int = attrs.field(default=0, eq=False)

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.lng_esn < self.bridge_esn or self.seal < 1 or self.last_timestamp_ms < 0:
            _fail(f"bad epoch end {self}")

    def to_json(self) -> dict[str, Any]:
        out = {"lng_esn": self.lng_esn, "bridge_esn": self.bridge_esn, "seal": self.seal}
        if self.last_timestamp_ms:
            out["last_timestamp_ms"] = self.last_timestamp_ms
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpochEnd:
        return cls(
            int(d["lng_esn"]),
            int(d["bridge_esn"]),
            int(d["seal"]),
            int(d.get("last_timestamp_ms", 0)),
        )


@attrs.frozen
class LogEpochs:
    """The epoch state of one log: the next epoch to hand out, and placement history."""

    next_epoch: int = 1
    history: tuple[EpochMetadata, ...] = ()

    def metadata_for(self, epoch: int) -> EpochMetadata | None:
        """The placement of ``epoch`` (None if no epoch that old was handed out)."""
        found = None
        for entry in self.history:
            if entry.since <= epoch:
                found = entry
            else:
                break
        return found

    @property
    def current(self) -> EpochMetadata | None:
        return self.history[-1] if self.history else None

    def to_json(self) -> dict[str, Any]:
        return {"next_epoch": self.next_epoch, "history": [h.to_json() for h in self.history]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LogEpochs:
        return cls(d["next_epoch"], tuple(EpochMetadata.from_json(h) for h in d["history"]))

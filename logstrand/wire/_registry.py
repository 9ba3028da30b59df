"""The registry of wire messages: fixed type numbers, field validators, and
the protocol versions this build speaks.

Each message type has a fixed number (``TYPE_ID``) that is never reused.  On
the wire a message is the CBOR array ``[type_id, field, field, ...]`` in field
order.  A field holding a ``PackedBatch`` travels as its bytes.  The
messages themselves are in ``_messages`` (connections, the write path,
sealing and recovery), ``_messages_ops`` (read streams, log state, trims,
node status, directories, compaction) and ``_messages_health`` (the failure
detector's gossip, the cluster state clients ask for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ..batch import PackedBatch
from ..errors import Status
from ..records import OPS

if TYPE_CHECKING:
    import attrs

#: The protocol versions this build speaks.  A connection uses the highest
#: version both ends support.  3: the failure detector's messages, digests
#: carry a packed batch (the old record batch format is gone).  4: many logs
#: in one request: ``GetTails`` (tails in one round per node) and
#: ``AppendMany`` (batches of many logs to their sequencer node); a v4
#: client asks a v3 node log by log and sends it each batch alone.  5:
#: ``Renew`` (``logs rebalance``), which needs every node on 5.  6: between
#: nodes, ``StoreMany``, ``StoreReplies`` and ``ReleaseMany`` (many logs'
#: STOREs, their answers and RELEASEs in one message); a v6 node sends a v5
#: node each alone.  7: ``GroupHeartbeat`` (members of a group, a client's
#: ``subscribe``), which a client sends only to a node on 7.  8:
#: ``TxnRequest`` (a client's ``transaction``), sent only to a node on 8.
#: 9: ``TierRead`` (a reader's read below a log's tiered point), sent only
#: to a node on 9.  10: ``ReadRecords.local_floor`` (a tiered log's copies a
#: node no longer keeps), which a node says only to a reader on 10.
PROTOCOL_VERSION_MIN = 3
PROTOCOL_VERSION_MAX = 10

MESSAGE_TYPES: dict[int, type[Any]] = {}
#: Who may send each request, declared with it (``message``): "node", only
#: a node of the cluster (copies, seals, release pointers between nodes); an
#: operation ("read", "append", "trim", "admin", ``records.OPS``) a client
#: needs on the message's log; "any", a client with no grant.  Replies and
#: the handshake are not here: no client sends them as requests.
ACCESS: dict[type[Any], str] = {}
#: Type numbers once used and retired: never given to another message.
#: 6 was ``Records`` (a batch in the old big-endian format).
RETIRED: frozenset[int] = frozenset({6})

_M = TypeVar("_M")


def message(type_id: int, access: str | None = None) -> Any:
    """Register a message class under a fixed type number; ``access``: who
    may send it as a request (``ACCESS``; None for a reply)."""
    if access is not None and access not in ("node", "any", *OPS):
        raise AssertionError(f"message {type_id}: unknown access {access!r}")

    def register(cls: type[_M]) -> type[_M]:
        if type_id in MESSAGE_TYPES or type_id in RETIRED:
            raise AssertionError(f"message type {type_id} used twice")
        cls.TYPE_ID = type_id  # type: ignore[attr-defined]
        MESSAGE_TYPES[type_id] = cls
        if access is not None:
            ACCESS[cls] = access
        return cls

    return register


def _status(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value not in Status._value2member_map_:
        raise ValueError(f"{attr.name}: unknown status {value!r:.20}")


def choose_version(peer_min: int, peer_max: int) -> int | None:
    """The highest version both ends speak, or None when the ranges do not overlap."""
    top = min(peer_max, PROTOCOL_VERSION_MAX)
    if top < max(peer_min, PROTOCOL_VERSION_MIN):
        return None
    return top


def _packed(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, PackedBatch):
        raise ValueError(f"{attr.name} must be a PackedBatch")


def _packed_from_wire(value: Any) -> Any:
    # Parsing checks the structure and the header checksum (not the body's:
    # the receiver checks that, where it has the status to answer with).
    if type(value) is bytes:
        return PackedBatch.parse(value)
    return value


#: At most this many batches in one message.
PACKED_MAX = 4096


def _packed_tuple(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not tuple or len(value) > PACKED_MAX:
        raise ValueError(f"{attr.name} must be a tuple of at most {PACKED_MAX} PackedBatches")
    for v in value:
        if not isinstance(v, PackedBatch):
            raise ValueError(f"{attr.name} must hold PackedBatches")


def _packed_tuple_from_wire(value: Any) -> Any:
    if type(value) is list and len(value) <= PACKED_MAX:
        return tuple(PackedBatch.parse(v) if type(v) is bytes else v for v in value)
    if type(value) is list:
        raise ValueError(f"more than {PACKED_MAX} batches")
    return value

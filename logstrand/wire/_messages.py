"""Wire messages of connections, the write path, and sealing and recovery:
one frozen attrs class per message type (see ``_registry``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ..records import PRODUCER_ENTRY_BYTES as ENTRY_BYTES
from ..types import lsn_epoch
from . import _fields as f
from ._registry import (
    _packed,
    _packed_from_wire,
    _packed_tuple,
    _packed_tuple_from_wire,
    _status,
    message,
)

if TYPE_CHECKING:
    from ..batch import PackedBatch


@message(1)
@attrs.frozen(slots=True)
class Hello:
    """First message of every connection, from the side that connected."""

    TYPE_ID: ClassVar[int]
    protocol_min: int = attrs.field(validator=f.u16)
    protocol_max: int = attrs.field(validator=f.u16)
    cluster: str = attrs.field(validator=f.text(256))
    #: The connecting node's id, or None for a client.
    node_id: int | None = attrs.field(default=None, validator=f.optional(f.u32))
    #: A user's token (``logstrand users add``); nodes take it over TLS only.
    token: str | None = attrs.field(default=None, validator=f.optional(f.text(512)), repr=False)

    def __attrs_post_init__(self) -> None:
        if self.protocol_min > self.protocol_max:
            raise ValueError("protocol_min above protocol_max")


@message(2)
@attrs.frozen(slots=True)
class HelloAck:
    """Answer to ``Hello``: the version chosen, or a status saying why not."""

    TYPE_ID: ClassVar[int]
    status: int = attrs.field(validator=_status)
    protocol: int = attrs.field(validator=f.u16)
    node_id: int | None = attrs.field(default=None, validator=f.optional(f.u32))
    #: With a status other than OK: why.
    message: str = attrs.field(default="", validator=f.text(1024))


@message(3, "any")
@attrs.frozen(slots=True)
class Ping:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)


@message(4)
@attrs.frozen(slots=True)
class Pong:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)


@message(5)
@attrs.frozen(slots=True)
class ErrorReply:
    """A request failed; ``request_id`` names it, ``status`` says why."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    message: str = attrs.field(default="", validator=f.text(4096))


@message(10, "append")
@attrs.frozen(slots=True)
class Append:
    """Client → sequencer node: append a batch of records to one log.

    The batch's header (LSNs, timestamp, wave, copyset) is ignored: the
    sequencer stamps its own in front of the body, which it passes on as the
    client packed it (compressed, with the client's checksum).
    """

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    batch: PackedBatch = attrs.field(converter=_packed_from_wire, validator=_packed)


@message(11)
@attrs.frozen(slots=True)
class AppendReply:
    """The records of an ``Append`` got LSNs ``first_lsn .. first_lsn + count - 1``.

    On failure ``status`` says why; with REDIRECTED, ``redirect`` names the
    node that runs the log's sequencer.
    """

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    first_lsn: int = attrs.field(default=0, validator=f.u64)
    count: int = attrs.field(default=0, validator=f.u32)
    timestamp_ms: int = attrs.field(default=0, validator=f.u64)
    redirect: int | None = attrs.field(default=None, validator=f.optional(f.u32))
    message: str = attrs.field(default="", validator=f.text(1024))


#: Logs' batches one ``AppendMany`` carries at most.
APPEND_MANY_MAX = 1024


def _same_length(what: str) -> Any:
    def check(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        if len(value) != len(getattr(inst, what)):
            raise ValueError(f"{attr.name} and {what} differ in length")

    return check


@message(53, "append")
@attrs.frozen(slots=True)
class AppendMany:
    """Client → sequencer node: batches of many logs whose sequencers run
    there, one per log entry, each as an ``Append`` would carry it (a Kafka
    ProduceRequest carries many partitions the same way).  The client needs
    ``append`` on every log named."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_ids: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u64, APPEND_MANY_MAX)
    )
    batches: tuple[PackedBatch, ...] = attrs.field(
        converter=_packed_tuple_from_wire,
        validator=[_packed_tuple, _same_length("log_ids")],
    )


@message(54)
@attrs.frozen(slots=True)
class AppendManyReply:
    """Per entry of an ``AppendMany``, in its order, what an ``AppendReply``
    says: status, first LSN, timestamp, the node to go to (0: none) and why
    (empty when OK)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    statuses: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(_status, APPEND_MANY_MAX)
    )
    first_lsns: tuple[int, ...] = attrs.field(
        converter=f.to_tuple,
        validator=[f.tuple_of(f.u64, APPEND_MANY_MAX), _same_length("statuses")],
    )
    timestamps_ms: tuple[int, ...] = attrs.field(
        converter=f.to_tuple,
        validator=[f.tuple_of(f.u64, APPEND_MANY_MAX), _same_length("statuses")],
    )
    redirects: tuple[int, ...] = attrs.field(
        converter=f.to_tuple,
        validator=[f.tuple_of(f.u32, APPEND_MANY_MAX), _same_length("statuses")],
    )
    messages: tuple[str, ...] = attrs.field(
        converter=f.to_tuple,
        validator=[f.tuple_of(f.text(1024), APPEND_MANY_MAX), _same_length("statuses")],
    )

    def reply(self, i: int, count: int) -> AppendReply:
        """Entry ``i`` (of ``count`` records) as an ``AppendReply``."""
        redirect = self.redirects[i] or None
        status = self.statuses[i]
        return AppendReply(
            self.request_id,
            status,
            self.first_lsns[i],
            count,
            self.timestamps_ms[i],
            redirect,
            self.messages[i],
        )


def _producer_entries(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not bytes or len(value) % ENTRY_BYTES:
        raise ValueError(f"{attr.name} must be whole producer entries")


@message(12, "node")
@attrs.frozen(slots=True)
class Store:
    """Sequencer → storage node: keep a copy of these records.

    ``wave`` counts the sequencer's attempts for these records (or carries the
    recovery's seal epoch); ``released_lsn`` is the sequencer's release
    pointer (the node may take everything up to it as released; never more
    than what is fully stored, and nothing before recovery is done).
    """

    TYPE_ID: ClassVar[int]
    store_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    wave: int = attrs.field(validator=f.u32)
    copyset: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=f.tuple_of(f.u32, max_len=255)
    )
    released_lsn: int = attrs.field(validator=f.u64)
    sync: bool = attrs.field(validator=f.boolean)
    #: The packed batch as the node stores it: its header repeats the wave
    #: and the copyset (the node checks that they agree).
    batch: PackedBatch = attrs.field(converter=_packed_from_wire, validator=_packed)
    #: Non-zero for a recovery's writes: its seal epoch, which lets them into a
    #: sealed epoch (a node takes them while this is above its seal).
    recovery_seal: int = attrs.field(default=0, validator=f.u32)
    #: A copy re-created by rebuilding, of released records: it goes into a
    #: sealed epoch, at the LSNs and timestamps the batch carries.
    rebuilding: bool = attrs.field(default=False, validator=f.boolean)
    #: A recovery's writes: the producer entries (``Producers.pack``) of the
    #: idempotent batches that end among these records, which the node keeps
    #: with them, as if the batches had come from their sequencer.
    producers: bytes = attrs.field(default=b"", validator=_producer_entries)

    @classmethod
    def of(
        cls,
        store_id: int,
        log_id: int,
        wave: int,
        copyset: tuple[int, ...],
        released_lsn: int,
        sync: bool,
        batch: PackedBatch,
        recovery_seal: int = 0,
        producers: bytes = b"",
    ) -> Store:
        """A STORE of a batch (``batch.make_batch``), under its wave and copyset."""
        packed = batch.reheader(copyset=copyset, wave=wave)
        return cls(
            store_id,
            log_id,
            wave,
            copyset,
            released_lsn,
            sync,
            packed,
            recovery_seal,
            producers=producers,
        )

    def __attrs_post_init__(self) -> None:
        if not self.copyset:
            raise ValueError("empty copyset")
        b = self.batch
        if lsn_epoch(b.first_lsn) != lsn_epoch(b.last_lsn):
            raise ValueError("a STORE carries records of one epoch")
        if b.wave != self.wave or b.copyset != self.copyset:
            raise ValueError("the batch's wave or copyset differs from the STORE's")
        if self.rebuilding and self.recovery_seal:
            raise ValueError("a STORE is written by recovery or by rebuilding, not both")
        if self.producers and not self.recovery_seal:
            raise ValueError("only a recovery's STORE carries producer entries")


@message(13)
@attrs.frozen(slots=True)
class StoreReply:
    TYPE_ID: ClassVar[int]
    store_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)


@message(14, "node")
@attrs.frozen(slots=True)
class Release:
    """Sequencer → nodeset: records of ``log_id`` up to ``lsn`` may be delivered."""

    TYPE_ID: ClassVar[int]
    log_id: int = attrs.field(validator=f.u64)
    lsn: int = attrs.field(validator=f.u64)


@message(28, "read")
@attrs.frozen(slots=True)
class GetSeqState:
    """Client → the log's sequencer node: make sure a sequencer runs for the log
    (activating one if needed) and answer with its state (``SeqState``)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)


@message(29)
@attrs.frozen(slots=True)
class SeqState:
    """The answer to ``GetSeqState``: the log's tail as its sequencer knows it
    (every acknowledged append, released or not), its epoch, and how the
    recovery of the earlier epochs stands."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    tail_lsn: int = attrs.field(default=0, validator=f.u64)
    epoch: int = attrs.field(default=0, validator=f.u32)
    recovered: bool = attrs.field(default=True, validator=f.boolean)
    #: Milliseconds since activation while the recovery is not done (else 0).
    recovering_ms: int = attrs.field(default=0, validator=f.u64)
    #: The recovery is past the node's bound: appends are refused meanwhile.
    stalled: bool = attrs.field(default=False, validator=f.boolean)
    attempts_failed: int = attrs.field(default=0, validator=f.u32)
    error: str = attrs.field(default="", validator=f.text(4096))
    #: With a status other than OK: why.
    message: str = attrs.field(default="", validator=f.text(4096))
    #: What the sequencer's node has released: storage nodes that asked
    #: because a release was overdue take it as their release pointer.
    released_lsn: int = attrs.field(default=0, validator=f.u64)


@message(30, "node")
@attrs.frozen(slots=True)
class Seal:
    """New sequencer → node: refuse every STORE of ``log_id`` in an epoch at or
    below ``seal_epoch`` from now on (persisted before the reply)."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    seal_epoch: int = attrs.field(validator=f.u32)


@message(31)
@attrs.frozen(slots=True)
class SealReply:
    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    seal_epoch: int = attrs.field(validator=f.u32)
    #: The newest timestamp among the node's records of the log.
    last_timestamp_ms: int = attrs.field(default=0, validator=f.u64)
    #: The producers of idempotent appends whose batches the node holds
    #: (``Producers.pack``: 36 bytes per batch).
    producers: bytes = attrs.field(default=b"", validator=_producer_entries)


@message(32, "node")
@attrs.frozen(slots=True)
class GetDigest:
    """Recovery → node: your copies of epoch ``epoch`` from ``start_esn`` on,
    released or not.  The node first seals the log up to ``seal_epoch``, so
    that nothing older lands on it after it answered."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    log_id: int = attrs.field(validator=f.u64)
    epoch: int = attrs.field(validator=f.u32)
    start_esn: int = attrs.field(validator=f.u32)
    seal_epoch: int = attrs.field(default=0, validator=f.u32)


@message(33)
@attrs.frozen(slots=True)
class Digest:
    """A node's copies for a recovery, with each copy's wave (precedence).
    ``complete``: nothing more in the epoch after these."""

    TYPE_ID: ClassVar[int]
    request_id: int = attrs.field(validator=f.u64)
    status: int = attrs.field(validator=_status)
    node_id: int = attrs.field(validator=f.u32)
    complete: bool = attrs.field(validator=f.boolean)
    waves: tuple[int, ...] = attrs.field(converter=f.to_tuple, validator=f.tuple_of(f.u32))
    #: The copies (their own flags, timestamps, keys and payloads), or None.
    batch: PackedBatch | None = attrs.field(
        converter=_packed_from_wire, validator=f.optional(_packed)
    )
    #: The node's producer entries (``Producers.pack``) of batches among these.
    producers: bytes = attrs.field(default=b"", validator=_producer_entries)

    def __attrs_post_init__(self) -> None:
        if len(self.waves) != (len(self.batch) if self.batch is not None else 0):
            raise ValueError("one wave per record")

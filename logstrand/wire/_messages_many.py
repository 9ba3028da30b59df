"""Wire messages between nodes that carry many logs at once (protocol 6).

A sequencer node sends the STOREs it has for one storage node together as
one ``StoreMany``, the storage node answers the STOREs one write took as one
``StoreReplies``, and the RELEASEs of a burst of work leave as one
``ReleaseMany`` per node.  Each entry means exactly what the single message
means (a Kafka ProduceRequest carries many partitions the same way); the
receiver takes the entries in order, each through the checks a single one
gets.  Only the write path's plain STOREs go this way: a recovery's, a
rebuilding's and a hand-off's are few and stay single.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from ..types import lsn_epoch
from . import _fields as f
from ._messages import Release, Store, StoreReply, _same_length
from ._registry import _packed_tuple, _packed_tuple_from_wire, _status, message

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..batch import PackedBatch

#: The protocol version from which a connection carries these messages.
MANY_PROTOCOL = 6
#: Entries one ``StoreMany``, ``StoreReplies`` or ``ReleaseMany`` carries at most.
MANY_MAX = 1024


_IDS = f.tuple_of(f.u64, MANY_MAX)


@message(57, "node")
@attrs.frozen(slots=True)
class StoreMany:
    """Sequencer node → storage node: plain STOREs (no recovery, no
    rebuilding) of many logs, entry ``i`` the ``Store`` that ``stores()``
    makes of it.  A batch's header carries its wave and copyset, so they
    are not repeated here."""

    TYPE_ID: ClassVar[int]
    store_ids: tuple[int, ...] = attrs.field(converter=f.to_tuple, validator=_IDS)
    log_ids: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=[_IDS, _same_length("store_ids")]
    )
    released_lsns: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=[_IDS, _same_length("store_ids")]
    )
    syncs: tuple[bool, ...] = attrs.field(
        converter=f.to_tuple,
        validator=[f.tuple_of(f.boolean, MANY_MAX), _same_length("store_ids")],
    )
    batches: tuple[PackedBatch, ...] = attrs.field(
        converter=_packed_tuple_from_wire,
        validator=[_packed_tuple, _same_length("store_ids")],
    )

    def __attrs_post_init__(self) -> None:
        if not self.store_ids:
            raise ValueError("no entries")
        for b in self.batches:
            if not b.copyset:
                raise ValueError("empty copyset")
            if lsn_epoch(b.first_lsn) != lsn_epoch(b.last_lsn):
                raise ValueError("a STORE carries records of one epoch")

    @classmethod
    def of(cls, stores: Sequence[Store]) -> StoreMany:
        """Plain STOREs together (``Store.of`` made each)."""
        for s in stores:
            if s.recovery_seal or s.rebuilding or s.producers:
                raise ValueError("only plain STOREs travel together")
        return cls(
            tuple(s.store_id for s in stores),
            tuple(s.log_id for s in stores),
            tuple(s.released_lsn for s in stores),
            tuple(s.sync for s in stores),
            tuple(s.batch for s in stores),
        )

    def stores(self) -> list[Store]:
        """The entries, each as the ``Store`` it stands for."""
        return [
            Store(sid, log, b.wave, b.copyset, released, sync, b)
            for sid, log, released, sync, b in zip(
                self.store_ids,
                self.log_ids,
                self.released_lsns,
                self.syncs,
                self.batches,
                strict=True,
            )
        ]


@message(58)
@attrs.frozen(slots=True)
class StoreReplies:
    """Storage node → sequencer node: the answers to STOREs of one write."""

    TYPE_ID: ClassVar[int]
    node_id: int = attrs.field(validator=f.u32)
    store_ids: tuple[int, ...] = attrs.field(converter=f.to_tuple, validator=_IDS)
    log_ids: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=[_IDS, _same_length("store_ids")]
    )
    statuses: tuple[int, ...] = attrs.field(
        converter=f.to_tuple,
        validator=[f.tuple_of(_status, MANY_MAX), _same_length("store_ids")],
    )

    @classmethod
    def of(cls, node_id: int, replies: Sequence[StoreReply]) -> StoreReplies:
        return cls(
            node_id,
            tuple(r.store_id for r in replies),
            tuple(r.log_id for r in replies),
            tuple(r.status for r in replies),
        )

    def replies(self) -> list[StoreReply]:
        node = self.node_id
        return [
            StoreReply(sid, log, status, node)
            for sid, log, status in zip(self.store_ids, self.log_ids, self.statuses, strict=True)
        ]


@message(59, "node")
@attrs.frozen(slots=True)
class ReleaseMany:
    """Sequencer node → storage node: ``Release(log_ids[i], lsns[i])`` for each ``i``."""

    TYPE_ID: ClassVar[int]
    log_ids: tuple[int, ...] = attrs.field(converter=f.to_tuple, validator=_IDS)
    lsns: tuple[int, ...] = attrs.field(
        converter=f.to_tuple, validator=[_IDS, _same_length("log_ids")]
    )

    def releases(self) -> list[Release]:
        return [Release(log, lsn) for log, lsn in zip(self.log_ids, self.lsns, strict=True)]

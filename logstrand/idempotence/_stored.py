"""The producer tables of a node's LogsDB: per log, the last batches of each
idempotent producer that this node stored (``logstrand.idempotence``).

They are written in the same RocksDB write as the batches they describe
(``Q | log | producer`` -> the producer's entries), so a node never holds a
batch without its entry.  A recovery's STORE carries the entries of the
batches it re-writes, so that a node holding only recovery's copies still
knows them.  A new sequencer asks the sealed nodes for them and
keeps only the batches that are in the log (see ``sequencer._procedures``):
an entry may name a batch that recovery later replaced with a hole, which is
why the tables are evidence, not truth.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Protocol

from ..errors import ProtocolError
from ._model import PRODUCERS_MAX, Producers, Sent, pack_entries

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..batch import PackedBatch


class Batch(Protocol):
    """One RocksDB write of LogsDB (its engine's batch)."""

    def put(self, cf: str, key: bytes, value: bytes) -> None: ...
    def delete(self, cf: str, key: bytes) -> None: ...


class PutBatch(Protocol):
    """A batch LogsDB stores, with the producer entries a recovery carries."""

    @property
    def log_id(self) -> int: ...
    @property
    def batch(self) -> PackedBatch: ...
    @property
    def producers(self) -> bytes: ...


PREFIX = b"Q"
_KEY = struct.Struct(">cQQ")


def _carried(data: bytes) -> list[tuple[int, Sent]]:
    """The entries a recovery's STORE carries; none when they do not parse
    (a node never fails a write for them: the batch is what matters)."""
    try:
        return Producers.unpack_entries(data)
    except ProtocolError:
        return []


def _key(log_id: int, producer: int) -> bytes:
    return _KEY.pack(PREFIX, log_id, producer)


class ProducerTables:
    """Every log's ``Producers`` on one node, loaded at open."""

    def __init__(self, meta_cf: str, producers_max: int = PRODUCERS_MAX) -> None:
        self.meta_cf = meta_cf
        self.producers_max = producers_max
        self._logs: dict[int, Producers] = {}
        #: Producers evicted from memory whose keys are still to delete.
        self._evicted: list[bytes] = []

    def table(self, log_id: int) -> Producers:
        t = self._logs.get(log_id)
        if t is None:
            t = self._logs[log_id] = Producers(producers_max=self.producers_max)
        return t

    def load(self, key: bytes, value: bytes) -> None:
        _, log_id, producer = _KEY.unpack(key)
        for _, sent in Producers.unpack_entries(value):
            self._note(log_id, producer, sent)

    def pack(self, log_id: int) -> bytes:
        t = self._logs.get(log_id)
        return t.pack() if t is not None else b""

    def stage(self, batch: Batch, puts: Iterable[PutBatch]) -> list[tuple[int, int, Sent]]:
        """Put the entries of the idempotent batches among ``puts`` into
        ``batch`` (the write that stores them); returns them for ``commit``."""
        fresh: list[tuple[int, int, Sent]] = []
        for put in puts:
            pb = put.batch
            if put.producers:
                fresh += [(put.log_id, pid, sent) for pid, sent in _carried(put.producers)]
            if pb.producer is None:
                continue
            pid, seq = pb.producer
            fresh.append((put.log_id, pid, Sent(seq, pb.count, pb.first_lsn, pb.timestamp_ms)))
        if not fresh:
            return fresh
        touched: dict[tuple[int, int], list[Sent]] = {}
        for log_id, pid, sent in fresh:
            # The producer's entries after this write (the table changes
            # only once the write is done: ``commit``).
            lst = touched.get((log_id, pid))
            if lst is None:
                lst = touched[log_id, pid] = self.table(log_id).sent(pid)
            if all(s.seq != sent.seq for s in lst):
                lst.append(sent)
        window = self.table(fresh[0][0]).window
        for (log_id, pid), lst in touched.items():
            lst.sort(key=lambda s: s.seq)
            batch.put(self.meta_cf, _key(log_id, pid), pack_entries(pid, lst[-window:]))
        for key in self._evicted:
            batch.delete(self.meta_cf, key)
        self._evicted.clear()
        return fresh

    def commit(self, fresh: list[tuple[int, int, Sent]]) -> None:
        """The write that ``stage`` filled is on disk: remember its entries."""
        for log_id, pid, sent in fresh:
            self._note(log_id, pid, sent)

    def _note(self, log_id: int, pid: int, sent: Sent) -> None:
        for gone in self.table(log_id).add(pid, sent):
            self._evicted.append(_key(log_id, gone))

    def evicted_into(self, batch: Batch) -> bool:
        """Put the deletions of evicted producers' keys into ``batch`` (after
        loading: the caller writes it); False when there are none."""
        for key in self._evicted:
            batch.delete(self.meta_cf, key)
        found = bool(self._evicted)
        self._evicted.clear()
        return found

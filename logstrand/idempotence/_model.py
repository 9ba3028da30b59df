"""Idempotent appends: what a log remembers of its producers.  Pure: no I/O.

A producer (a client, or a Spark task) has an id from the cluster and
numbers the records it appends to each log from 0: a batch carries its
producer id and the sequence number of its first record (``PackedBatch``'s
producer column).  A log keeps, per producer, the last ``WINDOW`` batches it
took, as ``Sent`` (first sequence number, record count, first LSN,
timestamp), and ``Producers.check`` judges a new batch against them:

* ``NEW``: the next number after the producer's last batch (0 for a producer
  it has never seen): store it;
* ``DUPLICATE``: a batch it holds, retried: answer with its LSNs, store
  nothing;
* ``OLD_DUPLICATE``: numbered below everything the window holds, so stored
  long ago; its LSNs are no longer known (a Spark task that is run again
  sends its batches again under the same id);
* ``OUT_OF_SEQUENCE``: a gap after the last batch, or batch boundaries that
  differ from the stored ones (the batch before it has not arrived yet, or
  never will);
* ``UNKNOWN``: a producer it does not know (expired, or evicted) sent a
  batch that does not start at 0;
* ``FENCED``: a Kafka producer's batch (``records.kafka_producer_key``) at
  an epoch below one the log has seen of the same producer id, in a batch
  or in a transaction's marker (numbered under the fence key): a newer
  producer of its transactional id replaced it, and its late writes must
  never be read as part of the new one's transactions.

The same table lives in three places: the sequencer (which checks), every
storage node (which records the batches it stores, durably with them, and
hands its table over when sealed), and the epoch store (a snapshot of the
producers of every clean epoch, written with the last clean epoch).  A new
sequencer rebuilds the table from the snapshot and from the sealed nodes'
tables, keeping of the latter only batches that recovery kept as records.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..errors import ProtocolError
from ..records import PRODUCER_ENTRY_BYTES, kafka_producer_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

#: Batches remembered per producer and log: the most a client has in flight.
WINDOW: Final = 5
#: Producers remembered per log (the least recently seen go first).  The
#: epoch store's snapshot of a log's table is at most this many x WINDOW x
#: 48 bytes (240 KB), well inside ZooKeeper's 1 MB per znode.
PRODUCERS_MAX: Final = 1000
#: A producer that appended nothing to a log for this long is forgotten
#: there (Kafka's ``producer.id.expiration.ms`` is one day too).
EXPIRY_MS: Final = 24 * 3600 * 1000
#: Producer ids with this bit are derived (Spark), not handed out.
DERIVED_BIT: Final = 1 << 63

_ENTRY = struct.Struct("<QQIQQ")  # producer id, seq, count, first lsn, timestamp
ENTRY_BYTES: Final = PRODUCER_ENTRY_BYTES
assert _ENTRY.size == ENTRY_BYTES


@attrs.frozen(slots=True)
class Sent:
    """One batch a log took from a producer."""

    seq: int
    count: int
    lsn: int
    timestamp_ms: int

    @property
    def last_seq(self) -> int:
        return self.seq + self.count - 1


class Verdict(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    OLD_DUPLICATE = "old duplicate"
    OUT_OF_SEQUENCE = "out of sequence"
    UNKNOWN = "unknown producer"
    FENCED = "fenced"


class Producers:
    """Producer id -> its last ``window`` batches, for one log (see the module
    docstring).  Iteration order is least recently added first."""

    __slots__ = ("_epochs", "_sent", "producers_max", "window")

    def __init__(self, *, producers_max: int = PRODUCERS_MAX, window: int = WINDOW) -> None:
        assert min(producers_max, window) >= 1
        self.producers_max = producers_max
        self.window = window
        self._sent: dict[int, list[Sent]] = {}
        #: Kafka producer id -> epoch -> how many of its keys in ``_sent``
        #: have that epoch: the fence (``check``) is the highest, and it
        #: stays the table's (derived from ``_sent``) as keys come and go,
        #: at a dict step each, not a scan of the table.
        self._epochs: dict[int, dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self._sent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Producers) and other._sent == self._sent

    def __repr__(self) -> str:
        return f"Producers({len(self._sent)} producers)"

    def sent(self, producer: int) -> list[Sent]:
        return list(self._sent.get(producer, ()))

    def entries(self) -> Iterator[tuple[int, Sent]]:
        for pid, sent in self._sent.items():
            for s in sent:
                yield pid, s

    # -- changes --------------------------------------------------------------

    def add(self, producer: int, sent: Sent) -> list[int]:
        """Remember a batch.  Of two entries for one sequence number the one
        at the higher LSN stays: the batch's later attempt.  (An earlier one
        went to a sequencer that a newer one replaced, and recovery may have
        plugged it with a hole; keeping the first, a node's table named the
        hole, recovery then kept no entry for the retry it decided a record,
        and the next sequencer took the next retry as new: the batch twice.)

        Returns the producers evicted to stay within ``producers_max``."""
        lst = self._sent.pop(producer, None)
        if lst is None:
            lst = []
            self._count(producer, 1)
        held = next((i for i, s in enumerate(lst) if s.seq == sent.seq), None)
        if held is None:
            lst.append(sent)
            lst.sort(key=lambda s: s.seq)
            del lst[: -self.window]
        elif lst[held].lsn < sent.lsn:
            lst[held] = sent
        self._sent[producer] = lst
        evicted: list[int] = []
        while len(self._sent) > self.producers_max:
            oldest = next(iter(self._sent))
            self._forget(oldest)
            evicted.append(oldest)
        return evicted

    def _forget(self, producer: int) -> None:
        del self._sent[producer]
        self._count(producer, -1)

    def _count(self, producer: int, step: int) -> None:
        """A key of ``_sent`` came (1) or went (-1): its Kafka epoch counted."""
        kafka = kafka_producer_of(producer)
        if kafka is None:
            return
        pid, epoch, _ = kafka
        epochs = self._epochs.setdefault(pid, {})
        n = epochs.get(epoch, 0) + step
        if n:
            epochs[epoch] = n
        else:
            del epochs[epoch]
            if not epochs:
                del self._epochs[pid]

    def update(self, entries: Iterable[tuple[int, Sent]]) -> None:
        for pid, s in entries:
            self.add(pid, s)

    def expire(self, now_ms: int, expiry_ms: int = EXPIRY_MS) -> list[int]:
        """Forget producers idle for ``expiry_ms``; returns them."""
        gone = [p for p, lst in self._sent.items() if lst[-1].timestamp_ms + expiry_ms < now_ms]
        for p in gone:
            self._forget(p)
        return gone

    # -- the check --------------------------------------------------------------

    def check(
        self, producer: int, seq: int, count: int, now_ms: int = 0, expiry_ms: int = EXPIRY_MS
    ) -> tuple[Verdict, Sent | None]:
        """Judge a batch of ``count`` records numbered from ``seq``; a producer
        idle since ``now_ms - expiry_ms`` is forgotten first."""
        kafka = kafka_producer_of(producer)
        if kafka is not None and not kafka[2]:
            epochs = self._epochs.get(kafka[0])
            if epochs and max(epochs) > kafka[1]:
                return Verdict.FENCED, None
        lst = self._sent.get(producer)
        if lst and lst[-1].timestamp_ms + expiry_ms < now_ms:
            self._forget(producer)
            lst = None
        if not lst:
            return (Verdict.NEW if seq == 0 else Verdict.UNKNOWN), None
        for s in lst:
            if s.seq == seq:
                if s.count == count:
                    return Verdict.DUPLICATE, s
                return Verdict.OUT_OF_SEQUENCE, s
        last = lst[-1]
        if seq == last.last_seq + 1:
            return Verdict.NEW, last
        if seq + count - 1 < lst[0].seq:
            return Verdict.OLD_DUPLICATE, None
        return Verdict.OUT_OF_SEQUENCE, last

    # -- encodings ----------------------------------------------------------------

    def pack(self) -> bytes:
        """Every entry, 36 bytes each (for the wire and LogsDB)."""
        return b"".join(pack_entries(pid, lst) for pid, lst in self._sent.items())

    @staticmethod
    def unpack_entries(data: bytes) -> list[tuple[int, Sent]]:
        """The entries of ``pack``'s bytes.

        Raises:
            ProtocolError: the length is not a whole number of entries, or an
                entry is empty.
        """
        if len(data) % ENTRY_BYTES:
            raise ProtocolError(f"producer entries of {len(data)} bytes")
        out: list[tuple[int, Sent]] = []
        for pid, seq, count, lsn, ts in _ENTRY.iter_unpack(data):
            if count == 0:
                raise ProtocolError("a producer entry of no records")
            out.append((pid, Sent(seq, count, lsn, ts)))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            str(pid): [[s.seq, s.count, s.lsn, s.timestamp_ms] for s in lst]
            for pid, lst in self._sent.items()
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None, **limits: int) -> Producers:
        out = cls(**limits)
        # Least recently seen first (the document's keys are sorted by id).
        for pid, lst in sorted((doc or {}).items(), key=lambda kv: max(e[3] for e in kv[1])):
            for seq, count, lsn, ts in lst:
                out.add(int(pid), Sent(int(seq), int(count), int(lsn), int(ts)))
        return out


def pack_entries(producer: int, sent: Iterable[Sent]) -> bytes:
    """One producer's entries as ``Producers.pack`` writes them."""
    return b"".join(_ENTRY.pack(producer, s.seq, s.count, s.lsn, s.timestamp_ms) for s in sent)


def derived_id(*parts: str | int) -> int:
    """A producer id made from ``parts`` (a Spark query, partition and
    epoch): the same parts give the same id, so a task that is run again
    appends under the id of its first run, and its batches are recognised.
    The top bit keeps these apart from the ids the cluster hands out."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") | DERIVED_BIT

"""What a new sequencer keeps of the producers of idempotent appends.  Pure.

Its table (``logstrand.idempotence``) is rebuilt from two sources:

* the epoch store's snapshot, which covers every clean epoch (a recovery
  writes it before it moves the last clean epoch, ``recover``);
* the tables of the nodes its activation sealed, for the unclean epochs.  An
  acknowledged batch has R copies, and the sealed nodes (an f-majority of
  every earlier nodeset) include one of them, which wrote the batch's entry
  in the same write as the batch.  But a node's entry may also name a batch
  that was never acknowledged and that recovery then plugged with a hole; a
  sequencer that believed it would answer a retry of that batch with LSNs
  that hold nothing.  So an entry of an unclean epoch is kept only when its
  records are in the log: at or below the epoch's last known good ESN
  (fully stored), or decided RECORD by this recovery (``kept``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ProtocolError
from ..types import lsn_epoch
from ..wire import Digest, SealReply
from ._model import Producers, Sent, pack_entries

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any

Entry = tuple[int, Sent]


def sealed_entries(replies: Mapping[int, Any]) -> list[Entry]:
    """Every batch entry the sealed nodes' tables hold (each once)."""
    out: dict[tuple[int, int, int], Entry] = {}
    for reply in replies.values():
        if not isinstance(reply, SealReply) or not reply.producers:
            continue
        try:
            entries = Producers.unpack_entries(reply.producers)
        except ProtocolError:
            continue  # (the wire checked the length: only an empty entry gets here)
        for pid, s in entries:
            out.setdefault((pid, s.seq, s.lsn), (pid, s))
    return list(out.values())


def digest_entries(reply: Digest) -> list[Entry]:
    """The entries a digest page carries (of the batches it holds)."""
    try:
        return Producers.unpack_entries(reply.producers)
    except ProtocolError:
        return []


def in_epoch(entries: Iterable[Entry], epoch: int) -> list[Entry]:
    return [(p, s) for p, s in entries if lsn_epoch(s.lsn) == epoch]


def kept(entries: Iterable[Entry], lng_esn: int, records: frozenset[int]) -> Iterator[Entry]:
    """The entries (of one epoch) whose records are in the log: every ESN at
    or below ``lng_esn`` or in ``records``."""
    for pid, s in entries:
        first = s.lsn & 0xFFFFFFFF
        last = first + s.count - 1
        if last <= lng_esn or all(x in records for x in range(max(first, lng_esn + 1), last + 1)):
            yield pid, s


def chunk_entries(entries: Iterable[Entry], first_esn: int, last_esn: int) -> bytes:
    """The entries (of one epoch) whose batches end at an ESN in
    ``first_esn..last_esn``, packed (``Producers.pack``): what a recovery
    chunk of those ESNs carries."""
    out = []
    for pid, s in entries:
        end = (s.lsn & 0xFFFFFFFF) + s.count - 1
        if first_esn <= end <= last_esn:
            out.append(pack_entries(pid, (s,)))
    return b"".join(out)

"""The cleaner's offset map: key hash → latest LSN, in a flat numpy hash table.

Each slot is 24 bytes: a 16-byte hash of the key (BLAKE2b, two u64 words) and
the LSN (u64; 0 marks an empty slot, as LSN 0 is never used).  Open
addressing with linear probing, no deletes, filled to at most
``load_factor`` of the slots, so a memory budget fixes how many keys a pass
can cover; a pass that meets more keys than that stops where the map is full
and the next pass goes on from there (Kafka's partial passes).

Two keys with equal 128-bit hashes would count as one (as in Kafka, which
uses MD5): the odds for a billion keys are below 10^-20.

Every operation works on whole batches with numpy; nothing loops per key in
Python except computing the hashes themselves.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

ENTRY_BYTES = 24
#: The smallest map a pass makes (``map_bytes_for``): 2,730 slots.
MAP_BYTES_MIN = 64 * 1024
_HASH = np.dtype("<u8")


def map_bytes_for(keys: int, most: int, load_factor: float = 0.9) -> int:
    """The memory of a map with room for ``keys`` keys, at most ``most``.

    A pass sizes its map to the records it may meet, not to the budget: numpy
    asks the kernel for huge pages for arrays of 4 MiB and more, and the
    first touch of each (zeroing 2 MiB, compacting memory to find it) cost a
    new 64 MiB map's first 200 keys 3-156 ms of CPU, against 0.2-0.4 ms in a
    map sized to them (``bench/micro.py --offset-map``), in one step of the
    node's loop."""
    return min(most, max(MAP_BYTES_MIN, (int(keys / load_factor) + 2) * ENTRY_BYTES))


def hash_keys(keys: Sequence[bytes]) -> np.ndarray:
    """(n, 2) u64 array: the 16-byte BLAKE2b hash of each key."""
    if not keys:
        return np.zeros((0, 2), dtype=_HASH)
    digests = b"".join([hashlib.blake2b(k, digest_size=16).digest() for k in keys])
    return np.frombuffer(digests, dtype=_HASH).reshape(-1, 2)


class MapFullError(Exception):
    """More new keys than the map has room for (callers check ``fits`` first)."""


class OffsetMap:
    def __init__(self, budget_bytes: int, *, load_factor: float = 0.9) -> None:
        if not 0 < load_factor <= 1:
            raise ValueError("load factor must be in (0, 1]")
        self.slots = max(2, budget_bytes // ENTRY_BYTES)
        self.capacity = max(1, int(self.slots * load_factor))
        self._h = np.zeros((self.slots, 2), dtype=_HASH)
        self._lsn = np.zeros(self.slots, dtype=np.uint64)
        self.size = 0

    @property
    def nbytes(self) -> int:
        return int(self._h.nbytes + self._lsn.nbytes)

    @property
    def room(self) -> int:
        return self.capacity - self.size

    @property
    def fill(self) -> float:
        return self.size / self.capacity

    def _probe(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each hash: its slot, or the empty slot where probing stopped;
        and whether it was found."""
        n = len(h)
        pos = (h[:, 0] % np.uint64(self.slots)).astype(np.int64)
        found = np.zeros(n, dtype=bool)
        active = np.arange(n)
        for _ in range(self.slots):  # bounded: a probe never visits a slot twice
            if not active.size:
                break
            p = pos[active]
            occupied = self._lsn[p] != 0
            match = occupied & (self._h[p, 0] == h[active, 0]) & (self._h[p, 1] == h[active, 1])
            found[active[match]] = True
            active = active[occupied & ~match]
            pos[active] = (pos[active] + 1) % self.slots
        return pos, found

    def get_many(self, h: np.ndarray) -> np.ndarray:
        """The LSN recorded for each hash (0 where absent)."""
        if not len(h):
            return np.zeros(0, dtype=np.uint64)
        pos, found = self._probe(h)
        return np.where(found, self._lsn[pos], np.uint64(0))

    def fits(self, h: np.ndarray) -> int:
        """How many leading entries of a batch (in LSN order) fit in the room left."""
        if not len(h):
            return 0
        _, found = self._probe(h)
        new = np.flatnonzero(~found)
        if not new.size:
            return len(h)
        firsts = np.sort(new[_first_of_each(h[new])])  # where each new key first appears
        if len(firsts) <= self.room:
            return len(h)
        return int(firsts[self.room])

    def put_many(self, h: np.ndarray, lsns: np.ndarray) -> None:
        """Record ``lsns[i]`` for ``h[i]``; a key's highest LSN wins."""
        if not len(h):
            return
        lsns = np.asarray(lsns, dtype=np.uint64)
        # One entry per key: the one with the highest LSN.
        order = np.argsort(lsns, kind="stable")[::-1]
        idx = order[_first_of_each(h[order])]
        h, lsns = h[idx], lsns[idx]
        pos, found = self._probe(h)
        if found.any():
            p = pos[found]
            self._lsn[p] = np.maximum(self._lsn[p], lsns[found])
        h, lsns = h[~found], lsns[~found]
        if len(h) > self.room:
            raise MapFullError(f"{len(h)} new keys, room for {self.room}")
        while len(h):
            pos, _ = self._probe(h)  # empty slots (these keys are not in the map)
            # Keys that land on the same empty slot: the first takes it, the
            # others probe again and find it taken.
            _, first = np.unique(pos, return_index=True)
            p = pos[first]
            self._h[p] = h[first]
            self._lsn[p] = lsns[first]
            self.size += len(first)
            rest = np.ones(len(h), dtype=bool)
            rest[first] = False
            h, lsns = h[rest], lsns[rest]

    def entries(self) -> bytes:
        """The occupied slots as bytes (h0, h1, lsn little-endian u64 each)."""
        occupied = self._lsn != 0
        table = np.empty((int(occupied.sum()), 3), dtype=_HASH)
        table[:, :2] = self._h[occupied]
        table[:, 2] = self._lsn[occupied]
        return table.tobytes()

    @classmethod
    def from_entries(cls, data: bytes, *, load_factor: float = 0.9) -> OffsetMap:
        """Rebuild a map from ``entries()`` (what nodes get from the cleaner)."""
        if len(data) % ENTRY_BYTES:
            raise ValueError("offset map entries are not a whole number of slots")
        table = np.frombuffer(data, dtype=_HASH).reshape(-1, 3)
        size = max(1, len(table))
        m = cls(int(size / load_factor + 2) * ENTRY_BYTES, load_factor=load_factor)
        if np.any(table[:, 2] == 0):
            raise ValueError("offset map entry with LSN 0")
        m.put_many(np.ascontiguousarray(table[:, :2]), table[:, 2])
        return m


def _first_of_each(h: np.ndarray) -> np.ndarray:
    """Indices of the first row of each distinct hash, in any order.  Sorting
    one u64 word is far cheaper than sorting 16-byte rows; rows that share the
    first word but not the second (about one pair in 2^64) take the slow path."""
    first_word = h[:, 0]
    _, first, inverse = np.unique(first_word, return_index=True, return_inverse=True)
    if np.array_equal(h[first[inverse], 1], h[:, 1]):
        return np.asarray(first)
    _, first = np.unique(_as_void(h), return_index=True)
    return np.asarray(first)


def _as_void(h: np.ndarray) -> np.ndarray:
    """Rows of an (n, 2) u64 array as single 16-byte values (for np.unique)."""
    return np.ascontiguousarray(h).view(np.dtype((np.void, 16))).ravel()

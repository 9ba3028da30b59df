"""Which log of a named range a keyed record goes to: Kafka's default
partitioner, so that a key lands in the same log whether a Kafka producer
(through the Kafka front) or logstrand's own client wrote it.

Kafka hashes the key with its variant of MurmurHash2 (seed ``0x9747b28c``,
4-byte little-endian blocks, the tail folded in before the final mix), takes
the hash's lower 31 bits, and reduces it modulo the partition count
(``org.apache.kafka.common.utils.Utils.murmur2`` and ``toPositive``).
Partition *i* of a range ``first..last`` is log ``first + i``.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
#: 2^32: a 32-bit word with its top bit set, read as negative (Java's int).
_WRAP = 0x1_0000_0000


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data``, as the Java client returns it (a signed 32-bit int)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - _WRAP if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition (0-based) Kafka's default partitioner gives ``key``."""
    if partitions < 1:
        raise ValueError("a range has at least one log")
    return (murmur2(key) & 0x7FFFFFFF) % partitions

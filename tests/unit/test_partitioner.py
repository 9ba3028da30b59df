"""Kafka's default partitioner (``placement._partitioner``): the hash the Java
client computes, so a key goes to the same log from either producer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logstrand.placement import murmur2, partition_for_key

#: Kafka's own vectors (``UtilsTest.testMurmur2``).
KAFKA = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_is_the_java_clients() -> None:
    for data, expected in KAFKA.items():
        assert murmur2(data) == expected, data


def test_the_partition_is_the_positive_hash_modulo_the_count() -> None:
    # toPositive(-790332482) = 1357151166; modulo 50 is 16.
    assert partition_for_key(b"foobar", 50) == 16
    assert partition_for_key(b"abc", 1) == 0


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_every_key_has_a_partition_in_range(key: bytes, n: int) -> None:
    assert 0 <= partition_for_key(key, n) < n
    assert -(2**31) <= murmur2(key) < 2**31

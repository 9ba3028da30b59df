"""The offset map against a dict, and the cleaner's decisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstrand.compaction import (
    ENTRY_BYTES,
    MAP_BYTES_MIN,
    Candidate,
    MapFullError,
    OffsetMap,
    choose,
    drops,
    hash_keys,
    map_bytes_for,
    order,
)

keys_st = st.lists(st.binary(min_size=0, max_size=4), min_size=0, max_size=300)


@given(keys=keys_st, budget_keys=st.integers(1, 400))
def test_offset_map_agrees_with_a_dict(keys: list[bytes], budget_keys: int) -> None:
    m = OffsetMap(budget_keys * ENTRY_BYTES + ENTRY_BYTES, load_factor=0.9)
    ref: dict[bytes, int] = {}
    lsn = 1
    pos = 0
    while pos < len(keys):
        chunk = keys[pos : pos + 37]
        h = hash_keys(chunk)
        k = m.fits(h)
        lsns = np.arange(lsn, lsn + k, dtype=np.uint64)
        m.put_many(h[:k], lsns)
        for key, x in zip(chunk[:k], lsns.tolist(), strict=True):
            ref[key] = x
        lsn += len(chunk)
        pos += len(chunk)
        if k < len(chunk):
            assert m.room < len({c for c in chunk[k:] if c not in ref}) + 1
            break
    assert m.size == len(ref) <= m.capacity
    if ref:
        got = m.get_many(hash_keys(list(ref))).tolist()
        assert got == list(ref.values())
    assert m.get_many(hash_keys([b"never-used-key"])).tolist() == [0]
    copy = OffsetMap.from_entries(m.entries())
    if ref:
        assert copy.get_many(hash_keys(list(ref))).tolist() == list(ref.values())


def test_offset_map_keeps_the_highest_lsn_and_refuses_overflow() -> None:
    m = OffsetMap(10 * ENTRY_BYTES, load_factor=0.5)
    assert m.capacity == 5
    m.put_many(hash_keys([b"a", b"b", b"a"]), np.array([5, 6, 7], dtype=np.uint64))
    m.put_many(hash_keys([b"a"]), np.array([3], dtype=np.uint64))  # older: ignored
    assert m.get_many(hash_keys([b"a", b"b"])).tolist() == [7, 6]
    h = hash_keys([b"c", b"a", b"d", b"e", b"f"])
    assert m.fits(h) == 4  # c, a (known), d, e fit; f is the 6th distinct key
    with pytest.raises(MapFullError):
        m.put_many(h, np.arange(10, 15, dtype=np.uint64))
    assert m.nbytes == 10 * ENTRY_BYTES


def test_drops_superseded_values_and_only_old_kept_tombstones() -> None:
    m = OffsetMap(100 * ENTRY_BYTES)
    # Dirty section up to LSN 20: a's latest is 12, b's 15 (a tombstone), c's 20.
    m.put_many(hash_keys([b"a", b"b", b"c"]), np.array([12, 15, 20], dtype=np.uint64))
    lsns = [1, 2, 3, 12, 15, 20, 21, 4]
    keys: list[bytes | None] = [b"a", b"b", None, b"a", b"b", b"c", b"a", b"t"]
    tomb = [False, False, False, False, True, False, False, True]
    ts = [100] * len(lsns)
    out = drops(lsns, ts, keys, tomb, m, end=20, old_clean_point=10, tombstone_horizon_ms=1000)
    # a@1 and b@2 superseded; the unkeyed record stays; latest values stay;
    # 21 is above the end; t@4 is a tombstone kept by an earlier pass, now expired.
    assert [lsns[i] for i in out] == [1, 2, 4]
    # Before its horizon, or not yet seen by an earlier pass, a tombstone stays.
    out = drops(lsns, ts, keys, tomb, m, end=20, old_clean_point=10, tombstone_horizon_ms=50)
    assert [lsns[i] for i in out] == [1, 2]
    out = drops(lsns, ts, keys, tomb, m, end=20, old_clean_point=0, tombstone_horizon_ms=1000)
    assert [lsns[i] for i in out] == [1, 2]


def test_choose_the_dirtiest_eligible_log() -> None:
    now = 1_000_000
    a = Candidate(1, total_bytes=100, clean_bytes=60, min_cleanable_ratio=0.5)  # 0.4
    b = Candidate(2, total_bytes=100, clean_bytes=20, min_cleanable_ratio=0.5)  # 0.8
    c = Candidate(3, total_bytes=100, clean_bytes=10, min_cleanable_ratio=0.95)  # 0.9
    assert choose([a, b, c], now) == b
    overdue = Candidate(
        4, 100, 90, 0.5, oldest_dirty_ms=now - 5000, max_compaction_lag_ms=1000
    )  # 0.1, but past its max lag
    assert choose([a, b, overdue], now) == overdue
    assert choose([a], now) is None
    assert not Candidate(5, 100, 100, 0.0).eligible(now)  # nothing dirty
    # A round cleans every eligible log, overdue first, then the dirtiest.
    d = Candidate(6, total_bytes=100, clean_bytes=30, min_cleanable_ratio=0.5)  # 0.7
    assert order([a, d, b, c, overdue], now) == [overdue, b, d]


def test_hashes_sharing_their_first_word_stay_two_keys() -> None:
    m = OffsetMap(100 * ENTRY_BYTES)
    h = np.array([[5, 1], [5, 2], [5, 1]], dtype=np.uint64)
    assert m.fits(h) == 3
    m.put_many(h, np.array([10, 11, 12], dtype=np.uint64))
    assert m.size == 2
    assert m.get_many(h[:2]).tolist() == [12, 11]


@given(keys=st.integers(0, 10_000_000), most=st.integers(ENTRY_BYTES * 2, 1 << 30))
def test_a_pass_map_has_room_for_its_keys_within_the_budget(keys: int, most: int) -> None:
    size = map_bytes_for(keys, most)
    assert size <= most
    assert size >= min(most, MAP_BYTES_MIN)
    if size < most:  # not cut by the budget: every key fits
        assert OffsetMap(size).capacity >= keys

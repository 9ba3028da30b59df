"""What the epoch store records of tiered objects (``epochstore/_tier_docs.py``),
on SQLite and on a real ZooKeeper alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from logstrand.epochstore import open_epoch_store
from logstrand.types import SegmentField, compose_lsn

if TYPE_CHECKING:
    from collections.abc import Iterator

    from logstrand.epochstore import EpochStore


@pytest.fixture
def store(store_url: str) -> Iterator[EpochStore]:
    s = open_epoch_store(store_url)
    try:
        yield s
    finally:
        s.close()


L = compose_lsn(1, 1)


def test_segments_follow_each_other_from_the_tiered_point(store: EpochStore) -> None:
    assert store.tier_state(5) == (0, [])
    assert store.record_tier_segment(5, 0, L, L + 9, "a", 100, 7, 10)
    assert store.record_tier_segment(5, L + 9, L + 10, L + 19, "b", 100, 8, 10)
    point, segments = store.tier_state(5)
    assert point == L + 19
    assert [s[2] for s in segments] == ["a", "b"]
    assert store.tier_points([5, 6]) == {5: L + 19, 6: 0}


def test_a_segment_keeps_its_newest_timestamp_when_given(store: EpochStore) -> None:
    """``find_time`` below the nodes' floors reads it; a segment recorded
    without it (as before it was kept) has none, and reads still work."""
    assert store.record_tier_segment(5, 0, L, L + 9, "old", 100, 7, 10)
    assert store.record_tier_segment(5, L + 9, L + 10, L + 19, "new", 100, 8, 10, 1_700_000)
    _, (old, new) = store.tier_state(5)
    assert len(old) == SegmentField.LAST_TS
    assert new[SegmentField.LAST_TS] == 1_700_000


def test_the_same_range_uploaded_twice_is_recorded_once(store: EpochStore) -> None:
    assert store.record_tier_segment(5, 0, L, L + 9, "by-node-1", 100, 7, 10)
    # The other node's upload of the range loses: it deletes its object.
    assert not store.record_tier_segment(5, 0, L, L + 9, "by-node-2", 100, 7, 10)
    # The winner's retry (its answer lost) is told it won.
    assert store.record_tier_segment(5, 0, L, L + 9, "by-node-1", 100, 7, 10)
    assert [s[2] for s in store.tier_state(5)[1]] == ["by-node-1"]
    # A range read past another point than the log's is refused.
    assert not store.record_tier_segment(5, L + 19, L + 20, L + 29, "c", 100, 7, 10)
    with pytest.raises(ValueError, match="segment"):
        store.record_tier_segment(5, L + 9, L + 10, L + 9, "d", 1, 1, 0)


def test_a_trim_drops_the_segments_below_it_and_names_their_objects(
    store: EpochStore,
) -> None:
    point = 0
    for i, key in enumerate("abc"):
        assert store.record_tier_segment(5, point, L + 10 * i, L + 10 * i + 9, key, 100, 7, 10)
        point = L + 10 * i + 9
    assert store.drop_tier_segments(5, L + 15) == ["a"]  # b reaches past the trim
    assert store.drop_tier_segments(5, L + 15) == []
    point, segments = store.tier_state(5)
    assert point == L + 29
    assert [s[2] for s in segments] == ["b", "c"]


def test_the_tier_feed_names_the_logs_that_changed(store: EpochStore) -> None:
    seq, logs = store.tiers_changed(-1)
    assert logs is None
    store.record_tier_segment(5, 0, L, L + 9, "a", 100, 7, 10)
    store.record_tier_segment(7, 0, L, L + 9, "b", 100, 7, 10)
    seq2, logs = store.tiers_changed(seq)
    assert (seq2, logs) == (seq + 2, [5, 7])
    assert store.tiers_changed(seq2) == (seq2, [])

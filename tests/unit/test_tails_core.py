"""The rules of ``tail_lsns`` (``client/_tails.py``' docstring), one at a
time, on the pure tally of the nodes' answers."""

from __future__ import annotations

from logstrand.client._tails_core import TailsTally, chunked
from logstrand.wire import TAILS_LOGS_MAX


def _entry(has: bool = False, acked: int = 0, release: int = 0, last: int = 0) -> list[int]:
    return [int(has), acked, release, last]


def test_a_tail_is_the_highest_number_any_node_gave() -> None:
    tally = TailsTally([7], storage=[1, 2], chunks=1)
    assert tally.take(1, (7,), _entry(release=10, last=12))
    assert tally.take(2, (7,), _entry(release=11, last=11))
    assert tally.tails == {7: 12}


def test_a_log_whose_sequencer_answered_is_never_asked_alone() -> None:
    # Node 2 never answers, and node 1 stores copies above the release
    # pointer: both would send the log alone, but its sequencer answered.
    tally = TailsTally([7], storage=[1, 2], chunks=1)
    tally.take(3, (7,), _entry(has=True, acked=20, release=15))
    tally.take(1, (7,), _entry(release=15, last=21))
    assert tally.alone() == []
    assert tally.tails == {7: 21}


def test_a_storage_node_that_did_not_answer_sends_the_log_alone() -> None:
    tally = TailsTally([7, 8], storage=[1, 2], chunks=1)
    tally.take(1, (7, 8), _entry(release=5, last=5) + _entry(release=9, last=9))
    assert tally.alone() == [7, 8]


def test_copies_above_every_release_pointer_send_the_log_alone() -> None:
    tally = TailsTally([7, 8], storage=[1], chunks=1)
    tally.take(1, (7, 8), _entry(release=5, last=6) + _entry(release=9, last=9))
    assert tally.alone() == [7]


def test_an_idle_log_with_everything_released_is_answered_by_the_nodes() -> None:
    tally = TailsTally([7], storage=[1, 2], chunks=1)
    tally.take(1, (7,), _entry(release=30, last=30))
    tally.take(2, (7,), _entry(release=30, last=29))
    assert tally.alone() == []
    assert tally.tails == {7: 30}


def test_an_answer_of_the_wrong_length_counts_as_none() -> None:
    tally = TailsTally([7, 8], storage=[1], chunks=1)
    assert not tally.take(1, (7, 8), _entry(release=5, last=5))  # one log's worth
    assert tally.tails == {7: 0, 8: 0}
    assert tally.alone() == [7, 8]


def test_a_node_answers_in_full_only_when_every_chunk_came_back() -> None:
    logs = list(range(1, TAILS_LOGS_MAX + 2))
    chunks = chunked(logs)
    assert [len(c) for c in chunks] == [TAILS_LOGS_MAX, 1]
    tally = TailsTally(logs, storage=[1], chunks=len(chunks))
    first = chunks[0]
    tally.take(1, first, _entry(release=3, last=3) * len(first))
    assert tally.alone() == logs  # the second chunk is missing: all in doubt
    tally.take(1, chunks[1], _entry(release=3, last=3))
    assert tally.alone() == []

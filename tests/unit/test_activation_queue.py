"""The bound on a node's activations at once (``ActivationQueue``)."""

from __future__ import annotations

import pytest

from logstrand.sequencer._activation_queue import ActivationQueue


def test_activations_past_the_bound_wait_and_start_in_order_as_others_end() -> None:
    q = ActivationQueue(2)
    assert q.add(10) == [10]
    assert q.add(11) == [11]
    assert q.add(12) == []
    assert q.add(13) == []
    assert (q.running, q.waiting) == (2, 2)
    assert q.finished() == 12  # 10 ended: its slot goes to the oldest waiting
    assert q.finished() == 13
    assert q.finished() is None
    assert (q.running, q.waiting) == (1, 0)
    assert q.finished() is None
    assert q.running == 0
    assert q.add(14) == [14]


def test_a_bound_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ActivationQueue(0)

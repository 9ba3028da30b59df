"""The release watch: copies a node stored that stay unreleased make it ask the
log's owner, soon, and never more than once per interval."""

from __future__ import annotations

from logstrand.storage._release_watch import ReleaseWatch


def test_an_overdue_release_is_asked_for_after_the_bound_then_at_most_every_interval() -> None:
    w = ReleaseWatch(after_s=1.0, every_s=2.0)
    w.stored(7, last_lsn=10, release_lsn=5, now=0.0)
    assert w.due(0.99) == []
    assert w.due(1.0) == [7]
    assert w.due(2.5) == []
    assert w.due(3.0) == [7]
    assert w.overdue(3.0) == 1
    w.released(7, 10, now=3.1)
    assert w.due(10.0) == []
    assert w.overdue(10.0) == 0


def test_under_load_the_release_passes_each_target_and_nothing_is_asked() -> None:
    w = ReleaseWatch(after_s=1.0, every_s=2.0)
    for i in range(100):
        now = i * 0.1
        w.stored(1, last_lsn=i + 2, release_lsn=i, now=now)  # two copies in flight
        w.released(1, i + 1, now)
        assert w.due(now) == []


def test_copies_stored_while_an_older_one_was_pending_are_not_forgotten() -> None:
    w = ReleaseWatch(after_s=1.0, every_s=2.0)
    w.stored(1, 10, 0, now=0.0)
    w.stored(1, 20, 0, now=0.5)  # keeps the older target, remembers 20
    w.released(1, 10, now=0.6)  # past the target: re-armed on 20
    assert w.due(1.5) == []
    assert w.due(1.6) == [1]
    w.released(1, 20, now=2.0)
    assert w.due(9.0) == []


def test_copies_at_or_below_the_release_pointer_are_never_overdue() -> None:
    w = ReleaseWatch()
    w.stored(3, last_lsn=5, release_lsn=5, now=0.0)
    assert w.due(100.0) == []


def test_a_forgotten_log_is_not_asked_about() -> None:
    w = ReleaseWatch(after_s=1.0, every_s=1.0)
    w.stored(4, 9, 0, now=0.0)
    w.forget(4)
    assert w.due(5.0) == []


def test_a_tick_costs_the_logs_due_not_the_logs_watched() -> None:
    """Rule 4: 10,000 logs with copies waiting for their release; the ticks
    before their deadline find nothing, and at it each is due once."""
    w = ReleaseWatch(after_s=1.0, every_s=2.0)
    for log in range(1, 10_001):
        w.stored(log, 10, 5, now=log / 10_000)
    assert w.due(0.99) == []
    assert len(w._heap) == 10_000
    assert w.due(1.5) == list(range(1, 5_001))
    assert w.due(2.0) == list(range(5_001, 10_001))
    assert w.due(2.9) == []


def test_a_late_release_makes_the_watch_more_patient_and_a_timely_one_less() -> None:
    """Rule 5: the owner's answer shows a recovered sequencer runs the log
    (busy, not dead): the next copy waits twice as long before a question,
    up to the bound; releases in good time bring it back."""
    w = ReleaseWatch(after_s=1.0, every_s=2.0, patience_max_s=4.0)
    w.stored(1, 10, 5, now=0.0)
    assert w.due(1.0) == [1]
    w.answered(1, running=True)
    w.released(1, 10, now=1.1)
    assert w.patience(1) == 2.0
    w.stored(1, 20, 10, now=2.0)
    assert w.due(3.5) == []
    assert w.due(4.0) == [1]
    w.answered(1, running=True)
    w.answered(1, running=True)
    assert w.patience(1) == 4.0  # the bound
    w.released(1, 20, now=4.5)
    w.stored(1, 30, 20, now=5.0)
    w.released(1, 30, now=5.1)  # in good time: halved
    assert w.patience(1) == 2.0
    w.stored(1, 40, 30, now=6.0)
    assert w.due(8.0) == [1]
    w.answered(1, running=False)  # no sequencer ran: back to the start
    assert w.patience(1) == 1.0

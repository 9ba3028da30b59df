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
    assert w.overdue(3.0) == [7]
    w.released(7, 10, now=3.1)
    assert w.due(10.0) == []
    assert w.overdue(10.0) == []


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

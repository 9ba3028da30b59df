"""The history checker of the partition tests catches what it is for: each
planted fault is reported, and a good history passes."""

from __future__ import annotations

import random

from tests.history import Append, History, check

E1 = 1 << 32


def good(n: int = 50) -> History:
    """Two clients appending in turn to two logs; two readers and the final one."""
    h = History()
    t = 0.0
    lsn = {1: E1, 2: E1}
    for i in range(n):
        log = 1 + i % 2
        lsn[log] += 1
        t += 1
        h.add(Append(f"c{i % 2}", log, b"p%d" % i, sent=t, done=t + 0.5, lsn=lsn[log]))
    h.add(Append("c0", 1, b"maybe", sent=t + 1, done=t + 2, error="TIMEDOUT"))
    for name in ("r1", "final"):
        items = h.reader(name)
        for log in (1, 2):
            items += [(a.log, a.lsn, a.payload) for a in h.appends if a.log == log and a.lsn]
    return h


def kinds(h: History) -> set[str]:
    return {line.split(":", 1)[0] for line in check(h)}


def test_a_good_history_passes() -> None:
    assert check(good()) == []


def test_an_indeterminate_append_may_be_in_the_log_once() -> None:
    h = good()
    h.reads["final"].append((1, E1 + 1000, b"maybe"))
    assert check(h) == []


def test_a_reader_that_skips_an_acknowledged_record_is_caught() -> None:
    h = good()
    del h.reads["final"][random.Random(1).randrange(len(h.reads["final"]))]
    assert kinds(h) == {"lost"}


def test_a_record_at_another_lsn_is_caught() -> None:
    h = good()
    log, lsn, payload = h.reads["final"][3]
    h.reads["final"][3] = (log, lsn + 100, payload)
    assert "lost" in kinds(h)


def test_a_duplicate_is_caught() -> None:
    h = good()
    log, lsn, payload = h.reads["final"][-1]
    h.reads["final"].append((log, lsn + 1, payload))
    assert kinds(h) == {"duplicate"}
    h = good()
    h.reads["r1"].append(h.reads["r1"][0])  # delivered twice by one reader
    assert "duplicate" in kinds(h)


def test_a_reordered_pair_is_caught() -> None:
    h = good()
    items = h.reads["r1"]
    items[4], items[5] = items[5], items[4]
    assert "order" in kinds(h)


def test_an_acknowledgement_out_of_real_time_order_is_caught() -> None:
    """The LSNs of two appends to one log, the second sent after the first
    was acknowledged, swapped in the log and in every reader."""
    h = good()
    ones = [a for a in h.appends if a.log == 1 and a.lsn]
    a, b = ones[2], ones[3]
    a.lsn, b.lsn = b.lsn, a.lsn
    for items in h.reads.values():
        items[:] = [(lg, x, p) for lg, x, p in items if lg != 1]
        items += sorted(((o.log, o.lsn, o.payload) for o in ones if o.lsn), key=lambda t: t[1])
    assert kinds(h) == {"realtime"}


def test_a_phantom_and_a_disagreement_are_caught() -> None:
    h = good()
    h.reads["r1"].append((2, E1 + 999, b"never appended"))
    assert "phantom" in kinds(h)
    h = good()
    log, lsn, _ = h.reads["r1"][0]
    h.reads["r1"][0] = (log, lsn, b"p3")
    assert "disagree" in kinds(h)


def test_a_reported_loss_is_caught() -> None:
    h = good()
    h.gaps.append(("r1", 1, "HOLE", E1 + 5, E1 + 5))
    assert check(h) == []
    h.gaps.append(("r1", 1, "DATALOSS", E1 + 7, E1 + 9))
    assert kinds(h) == {"loss"}

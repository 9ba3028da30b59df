"""A committed reader's view of one log (``client._committed_view``), fed
made-up runs: it delivers the records of committed transactions and those
outside any, in LSN order, up to the last stable LSN, and never an aborted
one, whether it holds what is open or spills and reads a range again."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from logstrand.client._committed_view import CommittedView
from logstrand.records import CONTROL, TRANSACTIONAL
from logstrand.transactions import encode_marker, producer_key


def _run(lsn: int, n: int, flags: int, pid: int | None, payloads: list[Any] | None = None) -> Any:
    packed = SimpleNamespace(producer=None if pid is None else (producer_key(pid, 0), 0))
    view = SimpleNamespace(packed=packed, payload_bytes=100 * n)
    lsns = list(range(lsn, lsn + n))
    return SimpleNamespace(
        lsns=lsns,
        last_lsn=lsns[-1],
        txn_flags=flags,
        view=view,
        payloads=payloads or [b"x"] * n,
    )


def _gap(lo: int, hi: int) -> Any:
    return SimpleNamespace(lo=lo, hi=hi)


def _log(seed: int) -> tuple[list[Any], set[int]]:
    """A log of plain runs, transactions of three producers, their markers
    and gaps; and the LSNs a committed reader must get from it."""
    rng = random.Random(seed)
    items: list[Any] = []
    open_txn: dict[int, list[int]] = {}
    visible: set[int] = set()
    lsn = 1
    for _ in range(rng.randint(5, 60)):
        kind = rng.random()
        n = rng.randint(1, 4)
        if kind < 0.25:
            items.append(_run(lsn, n, 0, None))
            visible.update(range(lsn, lsn + n))
        elif kind < 0.6:
            pid = rng.randint(1, 3)
            items.append(_run(lsn, n, TRANSACTIONAL, pid))
            open_txn.setdefault(pid, []).extend(range(lsn, lsn + n))
        elif kind < 0.85 and open_txn:
            pid = rng.choice(sorted(open_txn))
            commit = rng.random() < 0.5
            n = 1
            items.append(_run(lsn, 1, CONTROL, None, [encode_marker(commit, pid, 0)]))
            if commit:
                visible.update(open_txn[pid])
            del open_txn[pid]
        else:
            items.append(_gap(lsn, lsn + n - 1))
        lsn += n
    stable = min((min(v) for v in open_txn.values()), default=lsn)
    return items, {x for x in visible if x < stable}


def _first(item: Any) -> int:
    return int(item.lsns[0]) if hasattr(item, "lsns") else int(item.lo)


def _read(items: list[Any], hold_max_bytes: int, chunk: int) -> list[int]:
    """The view driven as the shell drives it: fed in chunks, a spilled
    range read again from the log when the view asks."""
    view = CommittedView(1, hold_max_bytes)
    out: list[Any] = []

    def again(span: tuple[int, int] | None) -> None:
        if span is not None:
            lo, hi = span
            out.extend(view.decided([i for i in items if lo <= _first(i) <= hi]))

    for at in range(0, len(items), chunk):
        out.extend(view.feed(items[at : at + chunk]))
        again(view.reread())
    view.at_end()
    again(view.reread())
    lsns = [x for i in out if hasattr(i, "lsns") and not i.txn_flags & CONTROL for x in i.lsns]
    assert lsns == sorted(lsns), "delivered out of order"
    return lsns


@pytest.mark.parametrize("seed", range(200))
def test_a_committed_reader_gets_exactly_the_committed_records_in_order(seed: int) -> None:
    items, visible = _log(seed)
    rng = random.Random(seed)
    # Holding all, and spilling after a few runs' bytes: the same records.
    for hold in (1 << 30, rng.choice((50, 300, 700))):
        lsns = _read(items, hold, rng.randint(1, 5))
        assert len(lsns) == len(set(lsns)), "delivered twice"
        assert set(lsns) == visible


def test_nothing_after_an_open_transaction_is_delivered_until_it_ends() -> None:
    view = CommittedView(1)
    assert len(view.feed([_run(1, 2, 0, None)])) == 1
    assert view.feed([_run(3, 2, TRANSACTIONAL, 9), _run(5, 1, 0, None)]) == []
    assert view.index.last_stable() == 3
    out = view.feed([_run(6, 1, CONTROL, None, [encode_marker(False, 9, 0)])])
    # The aborted run dropped; the plain one and the marker out (a reader
    # drops markers when it makes records).
    assert [(i.lsns, i.txn_flags) for i in out] == [([5], 0), ([6], CONTROL)]


def test_the_view_forgets_aborted_transactions_it_read_past() -> None:
    """A reader that follows a log of many aborted transactions keeps none
    it has read past (they precede everything still to deliver)."""
    view = CommittedView(1)
    lsn = 1
    for _ in range(1000):
        view.feed([_run(lsn, 2, TRANSACTIONAL, 5)])
        view.feed([_run(lsn + 2, 1, CONTROL, None, [encode_marker(False, 5, 0)])])
        lsn += 3
    assert view.feed([_run(lsn, 1, 0, None)])[0].lsns == [lsn]
    assert len(view.index.aborted) <= 1

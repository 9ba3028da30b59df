"""``transactions.TxnIndex``: a log's last stable LSN and aborted
transactions, from its batches and markers in LSN order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logstrand.transactions import (
    Aborted,
    TxnIndex,
    decode_marker,
    encode_marker,
    producer_key,
    producer_of,
)


def test_markers_round_trip_and_anything_else_is_no_marker() -> None:
    assert decode_marker(encode_marker(True, 7, 3)) == (True, 7, 3)
    assert decode_marker(encode_marker(False, 2**62, 32_767)) == (False, 2**62, 32_767)
    for other in (None, b"", b"x" * 12, b"\x01" + encode_marker(True, 1, 1)[1:]):
        assert decode_marker(other) is None


def test_an_open_transaction_holds_the_last_stable_lsn_until_its_marker() -> None:
    index = TxnIndex(start=10)
    assert index.last_stable() == 10
    index.records(10, 12, None)  # plain records are stable once read
    assert index.last_stable() == 13
    index.records(13, 14, producer_id=5)  # producer 5's transaction opens
    index.records(15, 20, None)
    index.records(21, 21, producer_id=6)
    assert index.last_stable() == 13
    index.marker(22, commit=True, producer_id=5)
    assert index.last_stable() == 21  # producer 6's is the oldest open now
    index.marker(23, commit=False, producer_id=6)
    assert index.last_stable() == 24
    assert index.aborted == [Aborted(21, 23, 6)]
    assert index.aborted_between(0, 20) == []
    assert index.aborted_between(21, 21) == [Aborted(21, 23, 6)]
    assert index.aborted_between(24, 30) == []
    # A marker again (a new coordinator finishing the decision): nothing.
    index.marker(24, commit=False, producer_id=6)
    assert index.aborted == [Aborted(21, 23, 6)]
    index.forget_below(24)
    assert index.aborted == []


def test_the_oldest_aborted_transactions_go_past_the_bound() -> None:
    from logstrand.transactions import _index

    index = TxnIndex(start=1)
    bound = 3
    old, _index.ABORTED_KEPT_MAX = _index.ABORTED_KEPT_MAX, bound
    try:
        for i in range(5):
            index.records(10 * i + 1, 10 * i + 5, producer_id=i)
            index.marker(10 * i + 6, commit=False, producer_id=i)
    finally:
        _index.ABORTED_KEPT_MAX = old
    assert [a.producer_id for a in index.aborted] == [2, 3, 4]
    assert index.kept_from == 17  # after the second one's marker


@given(
    st.lists(
        st.tuples(st.sampled_from(["plain", "txn", "commit", "abort"]), st.integers(0, 3)),
        max_size=60,
    )
)
def test_a_committed_reader_with_the_index_sees_exactly_the_committed_records(
    steps: list[tuple[str, int]],
) -> None:
    """A log written by four producers at random, one record per step: the
    records below the last stable LSN that are not in an aborted range of
    their producer are exactly the plain ones and those of committed
    transactions."""
    index = TxnIndex(start=1)
    written: list[tuple[int, int | None]] = []  # (lsn, producer of a transaction)
    opened: dict[int, list[int]] = {}
    committed: set[int] = set()
    for lsn, (kind, pid) in enumerate(steps, start=1):
        if kind == "plain":
            index.records(lsn, lsn, None)
            written.append((lsn, None))
            committed.add(lsn)
        elif kind == "txn":
            index.records(lsn, lsn, pid)
            written.append((lsn, pid))
            opened.setdefault(pid, []).append(lsn)
        else:
            index.marker(lsn, kind == "commit", pid)
            if kind == "commit":
                committed.update(opened.pop(pid, []))
            else:
                opened.pop(pid, None)
    stable = index.last_stable()
    seen = set()
    for lsn, pid in written:
        if lsn >= stable:
            continue
        dropped = pid is not None and any(
            a.producer_id == pid and a.first_lsn <= lsn <= a.marker_lsn
            for a in index.aborted_between(lsn, lsn)
        )
        if not dropped:
            seen.add(lsn)
    assert seen == {x for x in committed if x < stable}
    # Nothing still open lies below the last stable LSN.
    assert all(lsn >= stable for lsns in opened.values() for lsn in lsns)


@given(st.integers(0, 2**46 - 1), st.integers(0, 32_767))
def test_a_producer_key_keeps_the_id_and_the_epoch_apart(pid: int, epoch: int) -> None:
    """Batches are numbered under (id, epoch): a producer that comes back at
    a new epoch is another producer to the log; markers under a fence key
    of their own; and no key is one the cluster hands its own producers or
    Spark derives."""
    key = producer_key(pid, epoch)
    assert producer_of(key) == (pid, epoch)
    assert key != producer_key(pid, (epoch + 1) % 32_768)
    fence = producer_key(pid, epoch, fence=True)
    assert fence != key
    assert producer_of(fence) == (pid, epoch)
    assert 2**46 <= key < 2**63  # above handed-out ids, below Spark's bit

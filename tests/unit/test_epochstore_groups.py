"""Grouped epoch-store calls (``AsyncEpochStore.grouped``, ``EpochStore.calls``):
a burst of activations goes in few thread hops and, on SQLite, one transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from logstrand.epochstore import AsyncEpochStore, Placement, open_epoch_store
from logstrand.errors import StaleError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from logstrand.epochstore import EpochStore


@pytest.fixture
def store(store_url: str) -> Iterator[EpochStore]:
    with open_epoch_store(store_url) as s:
        yield s


PLACE = Placement((1, 2, 3), 2)


async def test_a_burst_of_epochs_goes_in_few_groups_and_each_caller_gets_its_own(
    store: EpochStore,
) -> None:
    groups: list[int] = []
    calls = store.calls

    def counted(fns: list[Any]) -> list[tuple[bool, Any]]:
        groups.append(len(fns))
        return calls(fns)

    store.calls = counted  # type: ignore[method-assign]
    astore = AsyncEpochStore(store)
    got: dict[int, int] = {}
    failed: list[BaseException] = []

    async def take(log: int) -> None:
        try:
            epoch, _ = await astore.grouped(
                lambda s: s.take_epoch(log, PLACE, expect_next=5 if log == 7 else None)
            )
            got[log] = epoch
        except StaleError as exc:
            failed.append(exc)

    async with trio.open_nursery() as nursery:
        for log in range(1, 301):
            nursery.start_soon(take, log)
    assert len(failed) == 1  # log 7's own error, to it alone
    assert "log 7" in str(failed[0])
    assert got == {log: 1 for log in range(1, 301) if log != 7}
    assert sum(groups) == 300
    assert len(groups) <= 10  # a few groups, not 300 hops
    # Taken for good: the next epoch of each is 2, of log 7 still 1.
    assert store.log_epochs(3).next_epoch == 2
    assert store.log_epochs(7).next_epoch == 1


def test_a_call_that_fails_halfway_leaves_nothing_of_itself(store: EpochStore) -> None:
    def half(s: EpochStore) -> None:
        s.take_epoch(10, PLACE)
        raise RuntimeError("then it failed")

    out = store.calls([lambda s: s.take_epoch(9, PLACE), half, lambda s: s.take_epoch(11, PLACE)])
    assert [ok for ok, _ in out] == [True, False, True]
    assert isinstance(out[1][1], RuntimeError)
    assert store.log_epochs(9).next_epoch == 2
    assert store.log_epochs(11).next_epoch == 2
    if store.url.startswith("sqlite"):  # its savepoint undid the half call's write
        assert store.log_epochs(10).next_epoch == 1


async def test_grouped_reads_go_on_while_another_process_holds_the_write_lock(
    tmp_path: Any,
) -> None:
    """A guard's epoch check (``read_only``) is a WAL reader: it neither takes
    nor waits for the write lock that another node's activations hold, while
    a group that may write waits for it."""
    import sqlite3

    url = f"sqlite://{tmp_path}/es.db"
    with open_epoch_store(url, create=True) as store:
        astore = AsyncEpochStore(store)
        other = sqlite3.connect(f"{tmp_path}/es.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's write, in progress
        try:
            with trio.fail_after(2):
                epochs = await astore.grouped(lambda s: s.log_epochs(1), read_only=True)
            assert epochs.next_epoch == 1
            with trio.move_on_after(0.3) as waited:
                await trio.to_thread.run_sync(
                    lambda: store.calls([lambda s: s.log_epochs(1)]), abandon_on_cancel=True
                )
            assert waited.cancelled_caught  # a writer's group waits for the lock
        finally:
            other.execute("ROLLBACK")
            other.close()

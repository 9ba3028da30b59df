"""Transactions meet the rest of the log store (issue 58): compaction of a
keyed log by Kafka's rules (the cleaner stops at the last stable LSN and
never lets an aborted record stand for its key), and a group's subscribe
reader that reads committed only, against real node processes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
import trio

import logstrand
from logstrand import Record
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import FencedError, InvalidArgumentError, LogstrandError
from logstrand.records import KEY_BYTES_MAX
from logstrand.testing import LocalCluster
from logstrand.transactions import producer_key

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

#: Compacted logs, one a test.
_COMPACTED = (40, 49)


class Boom(Exception):
    """Raised in a transaction's block to abort it."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("txnr") / "c",
        nodes=3,
        # Ids idle for 3 s expire (7 days by default): the expiry test's.
        node_args=("--compaction-interval", "0", "--transactional-id-expiry", "3s"),
    ) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 30, LogAttributes(replication_factor=2))
            store.create_logs(
                *_COMPACTED, LogAttributes(replication_factor=2, cleanup_policy="compact")
            )
        yield c


async def _latest(client: Any, log: int, isolation: str) -> dict[bytes, bytes | None]:
    """Each key's latest value that a reader of ``log`` to its tail gets now."""
    out: dict[bytes, bytes | None] = {}
    async with client.read(log, isolation=isolation) as reader:
        async for item in reader:
            if isinstance(item, Record):
                assert item.key is not None
                out[item.key] = item.payload
    return out


def test_compaction_keeps_committed_values_and_stops_at_an_open_transaction(
    cluster: LocalCluster,
) -> None:
    """An aborted record of a key is never its latest value for the offset
    map (it would have removed the committed one before it), and a pass
    ends before the first record of a transaction still open (whose records
    may yet abort): Kafka's cleaner stops at the last stable offset."""
    log = 40

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            await client.append(log, b"a-1", key=b"a")
            await client.append(log, b"b-1", key=b"b")
            with pytest.raises(Boom):  # noqa: PT012 (the block is the point)
                async with client.transaction("tc-abort") as tx:
                    await tx.append(log, b"a-aborted", key=b"a")
                    raise Boom
            opened, finish = trio.Event(), trio.Event()
            open_at: list[int] = []

            async def open_transaction() -> None:
                with pytest.raises(Boom):  # noqa: PT012
                    async with client.transaction("tc-open") as tx:
                        open_at.append(await tx.append(log, b"b-open", key=b"b"))
                        opened.set()
                        await finish.wait()
                        raise Boom

            async with trio.open_nursery() as nursery:
                nursery.start_soon(open_transaction)
                await opened.wait()
                await client.append(log, b"c-1", key=b"c")
                stats = await client.compact(log)
                # The pass ended before the open transaction's first record.
                assert stats["clean_point"] < open_at[0], (stats, open_at)
                finish.set()
            await client.append(log, b"c-2", key=b"c")
            want = {b"a": b"a-1", b"b": b"b-1", b"c": b"c-2"}
            assert await _latest(client, log, "committed") == want
            # Two passes: the second goes over what the first stopped short of.
            removed = 0
            for _ in range(2):
                stats = await client.compact(log)
                removed += stats["records_removed"]
                assert await _latest(client, log, "committed") == want
            assert stats["clean_point"] > open_at[0], stats
            assert removed >= 1, stats  # c-1, superseded by c-2

    trio.run(main)


async def _take(sub: Any, got: list[tuple[int, bytes | None]], n: int) -> None:
    """Pairs of ``sub`` into ``got`` (records only) until it holds ``n``."""
    while len(got) < n:
        for log, item in await sub.next_pairs():
            if isinstance(item, Record):
                got.append((log, item.payload))


def test_a_committed_subscription_gets_a_transaction_at_commit_and_never_an_abort(
    cluster: LocalCluster,
) -> None:
    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            await client.append(5, b"plain-1")
            got: list[tuple[int, bytes | None]] = []
            async with client.subscribe("g-committed", [5, 6], isolation="committed") as sub:
                with trio.fail_after(30):
                    await _take(sub, got, 1)
                async with client.transaction("t-sub") as tx:
                    await tx.append(5, b"t-5")
                    await tx.append(6, b"t-6")
                    await client.append(6, b"plain-2")  # after the open one: held
                    with trio.move_on_after(0.5):
                        await _take(sub, got, 2)
                    assert got == [(5, b"plain-1")]
                with trio.fail_after(30):
                    await _take(sub, got, 4)
                with pytest.raises(Boom):  # noqa: PT012 (the block is the point)
                    async with client.transaction("t-sub") as tx:
                        await tx.append(5, b"lost")
                        raise Boom
                await client.append(5, b"plain-3")
                with trio.fail_after(30):
                    await _take(sub, got, 5)
            by_log = {log: [p for g, p in got if g == log] for log in (5, 6)}
            assert by_log == {5: [b"plain-1", b"t-5", b"plain-3"], 6: [b"t-6", b"plain-2"]}

    trio.run(main)


def test_a_committed_read_of_many_logs_spills_and_reads_the_range_again(
    cluster: LocalCluster,
) -> None:
    """A log's view holds its share of the read buffer at most (64 KiB
    here): a transaction of 200 KiB spills it, and at the commit the
    range is read again, in order, while the other log went on."""
    settings = logstrand.ClientSettings(read_buffer_bytes=128 * 1024)
    records = [b"%04d" % i + b"x" * 1020 for i in range(200)]

    async def main() -> None:
        async with logstrand.open_client(cluster.url, settings=settings) as client:
            got: list[tuple[int, bytes | None]] = []
            starts = {7: logstrand.LSN_OLDEST, 8: logstrand.LSN_OLDEST}
            async with client.read_many(starts, None, isolation="committed") as reader:
                async with client.transaction("t-spill") as tx:
                    for i in range(0, 200, 50):
                        await tx.append_batch(7, records[i : i + 50])
                    await client.append(7, b"after")
                    await client.append(8, b"other")
                    with trio.fail_after(30):
                        await _take(reader, got, 1)  # the other log goes on
                    assert got == [(8, b"other")]
                    view = reader._slots[7].view
                    assert view is not None
                    with trio.fail_after(30):
                        while view.spilled_from is None:
                            await reader.next_pairs(deadline=trio.current_time() + 0.05)
                with trio.fail_after(30):
                    await _take(reader, got, 202)
            assert [p for g, p in got if g == 7] == [*records, b"after"]

    trio.run(main)


def test_blocking_code_runs_transactions_too(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        with client.transaction("t-blocking") as tx:
            tx.append(9, b"b1")
            tx.append_batch(9, [b"b2", b"b3"])
            tx.commit_positions("g-blocking", {9: 1})
            assert tx.producer[1] >= 0
            assert [i for i in client.read(9, isolation="committed")] == []
        with pytest.raises(Boom), client.transaction("t-blocking") as tx:  # noqa: PT012
            tx.append(9, b"lost")
            raise Boom
        client.append(9, b"b4")
        seen: list[bytes | None] = []
        for _ in range(600):
            seen = [
                i.payload for i in client.read(9, isolation="committed") if isinstance(i, Record)
            ]
            if len(seen) == 4:
                break
            time.sleep(0.05)
        assert seen == [b"b1", b"b2", b"b3", b"b4"]
        assert client.committed("g-blocking", 9) == 1
        with pytest.raises(InvalidArgumentError):
            client.transaction("t-blocking").append(9, b"outside a with")


def test_a_failed_transactions_late_append_is_fenced_by_its_abort(cluster: LocalCluster) -> None:
    """A transaction whose step failed aborts at the next epoch (by INIT),
    so an append of it that lands late (``late``, numbered as the next
    batch of its epoch would be) is refused by the log.  Aborted at its own
    epoch instead, the ABORT marker fenced only older epochs: the late
    append was taken, joined the producer's next transaction in the log,
    and a committed reader showed it when that one committed (found by
    the simulation, seed 592 of ``--transactions``)."""
    log = 10

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            with pytest.raises(LogstrandError):  # noqa: PT012 (the block is the point)
                async with client.transaction("t-late") as tx:
                    await tx.append(log, b"aborted")
                    pid, epoch = tx.producer
                    # An append that fails: the producer's numbering in the
                    # log is unknown now (a real one may time out and land).
                    await tx.append(log, b"v", key=b"k" * (KEY_BYTES_MAX + 1))
            key = producer_key(pid, epoch)
            with pytest.raises(FencedError):
                await client.append_numbered(log, [b"late"], producer=(key, 1), transactional=True)
            async with client.transaction("t-late") as tx:
                await tx.append(log, b"next")
                # The abort's epoch, then a new one (or, had the id idled past
                # this module's 3 s expiry meanwhile, a new producer id).
                assert tx.producer[0] != pid or tx.producer[1] > epoch + 1
            got = await _payloads(client, log, "committed")
            assert got == [b"next"], got

    trio.run(main)


async def _payloads(client: Any, log: int, isolation: str) -> list[bytes | None]:
    async with client.read(log, isolation=isolation) as reader:
        return [i.payload async for i in reader if isinstance(i, Record)]


def test_a_committed_read_to_an_lsn_waits_for_the_transactions_open_there(
    cluster: LocalCluster,
) -> None:
    """A read to an LSN (a Spark partition's range, a micro-batch) reads on
    past it until every transaction with records up to it is decided, and
    delivers the committed records up to it: ranges that share a log get
    each committed record once, and none waits for a later range.  To the
    tail, it stops before the open transaction instead."""
    log = 12

    async def read_to(client: Any, until: int, got: list[bytes | None]) -> None:
        async with client.read(log, 1, until, isolation="committed") as reader:
            got += [i.payload async for i in reader if isinstance(i, Record)]

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            await client.append(log, b"before")
            for outcome in (b"commit", b"abort"):
                got: list[bytes | None] = []
                tx = client.transaction("t-range")
                await tx.__aenter__()
                await tx.append(log, b"in-" + outcome)
                until = await client.append(log, b"plain-" + outcome)
                await client.append(log, b"past-" + outcome)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_to, client, until, got)
                    await trio.sleep(0.3)
                    assert got == []  # it waits for the transaction
                    # To the tail, a committed reader stops at the open one.
                    assert b"plain-" + outcome not in await _payloads(client, log, "committed")
                    if outcome == b"commit":
                        await tx.__aexit__(None, None, None)
                    else:
                        await tx.__aexit__(Boom, Boom(), None)
                want = [b"in-commit", b"plain-commit"] if outcome == b"commit" else [b"plain-abort"]
                assert got[-len(want) :] == want, got
                assert b"past-" + outcome not in got

    trio.run(main)


def test_every_node_says_how_many_transactions_it_coordinates_are_open(
    cluster: LocalCluster,
) -> None:
    """The coordinator's metrics come from every node, not only from one
    serving Kafka (this cluster serves none)."""

    def opened() -> float:
        return sum(
            cluster.metric(n, "logstrand_transactions_open", default=-100) for n in cluster.nodes
        )

    with logstrand.connect(cluster.url) as client:
        before = opened()
        assert before >= 0  # every node has the metric
        tx = client.transaction("t-metric")
        tx.__enter__()
        tx.append(14, b"open")
        assert opened() == before + 1
        tx.__exit__(None, None, None)
        deadline = time.monotonic() + 10
        while opened() != before:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_prepared_transaction_is_committed_by_another_client_with_its_tag(
    cluster: LocalCluster,
) -> None:
    """Two-phase commit: a transaction left open by ``prepare`` is
    committed (or aborted) from another client, as a Spark driver commits
    what its tasks wrote; the commit's tag is kept in the id's state."""
    log = 13
    with logstrand.connect(cluster.url) as writer:
        with writer.transaction("t-2pc") as tx:
            tx.append(log, b"prepared")
            prepared = tx.prepare()
            assert prepared is not None
        with writer.transaction("t-2pc-b") as tx:
            tx.append(log, b"to abort")
            doomed = tx.prepare()
            assert doomed is not None
        with writer.transaction("t-2pc-empty") as tx:
            assert tx.prepare() is None  # nothing written: nothing to commit
        assert [i for i in writer.read(log, isolation="committed")] == []
    with logstrand.connect(cluster.url) as driver:
        assert driver.transaction_state("t-2pc")["state"] == "Ongoing"
        driver.commit_prepared(prepared, tag="batch 7")
        driver.commit_prepared(prepared, tag="batch 7")  # again: no error
        driver.abort_prepared(doomed)
        state = driver.transaction_state("t-2pc")
        assert (state["state"] in ("PrepareCommit", "CompleteCommit"), state["tag"]) == (
            True,
            "batch 7",
        )
        assert driver.transaction_state("nobody") is None
        deadline = time.monotonic() + 20
        while [r.payload for r in driver.read(log, isolation="committed")] != [b"prepared"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(InvalidArgumentError):
            driver.commit_prepared(prepared, tag="x" * 300)


def test_an_idle_transactional_id_expires_and_its_producer_starts_afresh(
    cluster: LocalCluster,
) -> None:
    """An id idle past --transactional-id-expiry, with nothing open, is
    forgotten and its state removed; a client that still holds its producer
    starts its next transaction with a new producer id, transparently."""
    with logstrand.connect(cluster.url) as client:
        with client.transaction("t-expire") as tx:
            tx.append(15, b"before")
            pid = tx.producer[0]
        assert client.transaction_state("t-expire") is not None
        deadline = time.monotonic() + 30
        while client.transaction_state("t-expire") is not None:
            assert time.monotonic() < deadline, "the id did not expire"
            time.sleep(0.2)
        with client.transaction("t-expire") as tx:
            tx.append(15, b"after")
            assert tx.producer[0] != pid
        deadline = time.monotonic() + 20
        while [r.payload for r in client.read(15, isolation="committed")] != [b"before", b"after"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)

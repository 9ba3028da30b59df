"""Transactions of logstrand's own client (``client.transaction``) against
real node processes (issue 58): records in several logs and a group's
positions visible to committed readers all at once or never, fencing by a
new producer of the id, an operator's abort from the CLI, a producer gone
silent aborted at its timeout, asyncio, and a Kafka read_committed
consumer that sees a native transaction when it commits."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
import trio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

import logstrand
from logstrand import TAIL, Record
from logstrand.client._committed import CommittedStream
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import FencedError, InvalidArgumentError, Status
from logstrand.records import positions_log_of
from logstrand.testing import LocalCluster
from logstrand.transactions import TxnError
from logstrand.wire import TxnOp, TxnRequest

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("txn") / "c",
        nodes=3,
        kafka=True,
        node_args=("--compaction-interval", "0", "--kafka-transactions"),
    ) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 30, LogAttributes(replication_factor=2))
        admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
        for future in admin.create_topics([NewTopic("ntx", num_partitions=1)]).values():
            future.result(30)
        yield c


async def _payloads(client: Any, log: int, isolation: str) -> list[bytes]:
    """What a reader of ``log`` up to its tail gets now."""
    async with client.read(log, isolation=isolation) as reader:
        return [i.payload for i in [x async for x in reader] if isinstance(i, Record)]


async def _eventually(what: str, ok: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    deadline = trio.current_time() + timeout_s
    while not await ok():
        assert trio.current_time() < deadline, f"no {what} after {timeout_s} s"
        await trio.sleep(0.05)


def test_a_transaction_shows_its_records_and_positions_all_at_once(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            await client.append(1, b"before")
            async with client.transaction("t-commit") as tx:
                await tx.append(1, b"a1")
                await tx.append_batch(2, [b"b1", b"b2"], keys=[b"k", None])
                await tx.commit_positions("g-commit", {3: 5})
                await client.append(1, b"after")  # not in the transaction
                # Open: a committed reader stops at the transaction's first
                # record; an uncommitted one sees everything.
                assert await _payloads(client, 1, "committed") == [b"before"]
                assert await _payloads(client, 1, "uncommitted") == [b"before", b"a1", b"after"]
                assert await _payloads(client, 2, "committed") == []
                assert await client.committed("g-commit", 3) is None
            want = {1: [b"before", b"a1", b"after"], 2: [b"b1", b"b2"]}

            async def visible() -> bool:
                return all(
                    [await _payloads(client, log, "committed") == w for log, w in want.items()]
                )

            await _eventually("committed records", visible)
            await _eventually("the position", lambda: _is(client.committed("g-commit", 3), 5))
            states = await client.transactions()
            assert states["t-commit"]["state"] in ("CompleteCommit", "PrepareCommit")

    trio.run(main)


async def _is(value: Awaitable[Any], want: Any) -> bool:
    return await value == want


def test_an_aborted_transaction_is_never_seen_by_a_committed_reader(cluster: LocalCluster) -> None:
    class Boom(Exception):
        pass

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            with pytest.raises(Boom):  # noqa: PT012 (the block is the point)
                async with client.transaction("t-abort") as tx:
                    await tx.append(4, b"lost")
                    await tx.commit_positions("g-abort", {3: 7})
                    raise Boom
            await client.append(4, b"kept")
            # A second transaction of the same producer commits after it.
            async with client.transaction("t-abort") as tx:
                await tx.append(4, b"second")
            await _eventually(
                "the records after the abort",
                lambda: _is(_payloads(client, 4, "committed"), [b"kept", b"second"]),
            )
            assert await _payloads(client, 4, "uncommitted") == [b"lost", b"kept", b"second"]
            assert await client.committed("g-abort", 3) is None

    trio.run(main)


def test_a_new_producer_of_the_id_fences_the_old_one(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with (
            logstrand.open_client(cluster.url) as old_client,
            logstrand.open_client(cluster.url) as new_client,
        ):
            old = old_client.transaction("t-fence")
            await old.__aenter__()
            await old.append(5, b"zombie-1")
            # The new producer starts: the old one's transaction is aborted
            # and its epoch fenced, in the logs and at the coordinator.
            async with new_client.transaction("t-fence") as new:
                await new.append(5, b"new-1")
            with pytest.raises(FencedError):
                await old.append(5, b"zombie-2")  # the log's fence
            with pytest.raises(FencedError):
                await old.append(6, b"zombie-3")  # the coordinator's
            with pytest.raises(FencedError):
                await old.commit()
            await old.__aexit__(None, None, None)
            await _eventually(
                "the new producer's record",
                lambda: _is(_payloads(new_client, 5, "committed"), [b"new-1"]),
            )
            assert b"zombie-2" not in await _payloads(new_client, 5, "uncommitted")

    trio.run(main)


def test_an_operator_aborts_a_stuck_transaction_and_a_silent_one_times_out(
    cluster: LocalCluster,
) -> None:
    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            stuck = client.transaction("t-stuck")
            await stuck.__aenter__()
            await stuck.append(7, b"stuck")
            await client.append(7, b"plain")
            assert await _payloads(client, 7, "committed") == []
            argv = [sys.executable, "-m", "logstrand", "transactions", "abort", "t-stuck"]
            done = await trio.run_process([*argv, "--url", cluster.url], capture_stdout=True)
            assert b"aborted" in done.stdout
            again = await trio.run_process(
                [*argv, "--url", cluster.url], capture_stderr=True, check=False
            )
            assert again.returncode != 0
            assert b"no open transaction" in again.stderr
            await _eventually(
                "the record after the aborted one",
                lambda: _is(_payloads(client, 7, "committed"), [b"plain"]),
            )
            with pytest.raises(FencedError):
                await stuck.commit()
            await stuck.__aexit__(None, None, None)

            # A producer that goes silent with a transaction open: its
            # coordinator aborts it after its timeout, and readers go on.
            silent = client.transaction("t-silent", timeout_s=1.0)
            await silent.__aenter__()
            await silent.append(8, b"silent")
            await client.append(8, b"next")
            start = time.monotonic()
            await _eventually(
                "the timeout's abort", lambda: _is(_payloads(client, 8, "committed"), [b"next"])
            )
            assert time.monotonic() - start >= 0.5
            with pytest.raises(FencedError):
                await silent.commit()

    trio.run(main)


def test_asyncio_code_runs_transactions_too(cluster: LocalCluster) -> None:
    async def main() -> list[bytes]:
        async with logstrand.open_client(cluster.url) as client:
            async with client.transaction("t-asyncio") as tx:
                await tx.append(9, b"one")
                await tx.append_batch(9, [b"two", b"three"])
            for _ in range(600):
                async with client.read(9, isolation="committed") as reader:
                    got = [i.payload async for i in reader if isinstance(i, Record)]
                if got:
                    return got
                await asyncio.sleep(0.05)
            return []

    assert asyncio.run(main()) == [b"one", b"two", b"three"]


def test_a_kafka_read_committed_consumer_sees_a_native_transaction_at_commit(
    cluster: LocalCluster,
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "ntx-reader",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["ntx"])

    def poll(seconds: float) -> list[bytes]:
        out: list[bytes] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
        return out

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            log = await client.log_of("ntx")
            async with client.transaction("t-kafka") as tx:
                await tx.append_batch(log, [b"k1", b"k2", b"k3"])
                # Open: nothing for a read_committed consumer.
                assert await trio.to_thread.run_sync(poll, 3.0) == []
            got: list[bytes] = []
            deadline = trio.current_time() + 30
            while len(got) < 3 and trio.current_time() < deadline:
                got += await trio.to_thread.run_sync(poll, 1.0)
            assert got == [b"k1", b"k2", b"k3"]

    try:
        trio.run(main)
    finally:
        consumer.close()


def test_a_sequencer_moving_mid_transaction_keeps_its_records(cluster: LocalCluster) -> None:
    """The node that sequences a log the transaction writes to is killed
    between two of its appends: the log's epoch changes, the producer's id
    and epoch do not, and the commit shows every record."""

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            await client.groups.ensure_log()
            for log in (10, 11):
                await client.ensure_sequencer(log)
            node = client.sequencer_node(10)
            # An id whose coordinator is elsewhere: this kills a sequencer only.
            for n in range(100):
                txn_id = f"t-seq-{n}"
                await client.ensure_sequencer(positions_log_of(txn_id))
                if client.sequencer_node(positions_log_of(txn_id)) != node:
                    break
            async with client.transaction(txn_id) as tx:
                await tx.append(10, b"s1")
                await tx.append(11, b"s2")
                assert node is not None
                await trio.to_thread.run_sync(cluster.kill_node, node)
                try:
                    await tx.append(10, b"s3")
                    await tx.append(11, b"s4")
                finally:
                    await trio.to_thread.run_sync(cluster.start_node, node)
            want = {10: [b"s1", b"s3"], 11: [b"s2", b"s4"]}

            async def visible() -> bool:
                got = {log: await _payloads(client, log, "committed") for log in want}
                return got == want

            await _eventually("every record of the transaction", visible, timeout_s=60)

    trio.run(main)


def test_a_new_clusters_first_act_may_be_a_transaction(tmp_path: Any) -> None:
    """No positions log exists yet (no group ever committed): the first
    transactional id makes them, as a group's first commit does."""
    with LocalCluster(tmp_path / "c", nodes=2) as fresh:
        with open_epoch_store(fresh.url) as store:
            store.create_logs(1, 2, LogAttributes(replication_factor=2))

        async def main() -> None:
            async with logstrand.open_client(fresh.url) as client:
                with trio.fail_after(60):
                    async with client.transaction("first") as tx:
                        await tx.append(1, b"x")
                    await _eventually(
                        "the record", lambda: _is(_payloads(client, 1, "committed"), [b"x"])
                    )

        trio.run(main)


def test_bad_transaction_requests_get_clear_answers_and_the_node_goes_on(
    cluster: LocalCluster,
) -> None:
    """``TxnRequest`` as a peer could send it: each refusal says why, and a
    transaction goes through afterwards."""

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            await client.groups.ensure_log()
            home = positions_log_of("t-bad")
            await client.ensure_sequencer(home)
            node = client.sequencer_node(home)
            assert node is not None

            async def ask(op: TxnOp, txn_id: str = "t-bad", **fields: Any) -> Any:
                reply = await client.ask_node(
                    node, lambda rid: TxnRequest(rid, int(op), txn_id, **fields), timeout_s=30
                )
                assert reply is not None
                return reply

            bad_id = await ask(TxnOp.INIT, "no spaces please", timeout_ms=1000)
            assert bad_id.status == Status.INVALID_PARAM
            assert "not a transactional id" in bad_id.message
            too_long = await ask(TxnOp.INIT, timeout_ms=3_600_001)
            assert too_long.error == TxnError.INVALID_TRANSACTION_TIMEOUT
            init = await ask(TxnOp.INIT, timeout_ms=60_000)
            pid, epoch = init.producer_id, init.producer_epoch
            # Logs that do not exist (4,096, the most a request names), a
            # bad group, a producer that is not the id's, a commit with
            # nothing open.
            unknown = await ask(
                TxnOp.ADD,
                producer_id=pid,
                producer_epoch=epoch,
                logs=tuple(range(10**9, 10**9 + 4096)),
            )
            assert unknown.status == Status.INVALID_PARAM
            assert f"log {10**9} does not exist" in unknown.message
            group = await ask(TxnOp.ADD, producer_id=pid, producer_epoch=epoch, groups=("a b",))
            assert (group.status, "not a group name" in group.message) == (
                Status.INVALID_PARAM,
                True,
            )
            other = await ask(TxnOp.ADD, producer_id=pid + 1, producer_epoch=epoch, logs=(12,))
            assert other.error == TxnError.INVALID_PRODUCER_ID_MAPPING
            nothing = await ask(TxnOp.COMMIT, producer_id=pid, producer_epoch=epoch)
            assert nothing.error == TxnError.INVALID_TXN_STATE
            assert (await ask(TxnOp.FORCE_ABORT)).error == TxnError.INVALID_TXN_STATE
            # Another node is not the id's coordinator: it says so.
            elsewhere = next(n for n in (1, 2, 3) if n != node)
            moved = await client.ask_node(
                elsewhere,
                lambda rid: TxnRequest(rid, int(TxnOp.FORCE_ABORT), "t-bad"),
                timeout_s=30,
            )
            assert moved.status == Status.REDIRECTED
            # The client refuses what it can see is wrong before asking.
            for bad in (
                lambda: client.transaction("t bad"),
                lambda: client.transaction("t-bad", timeout_s=math.nan),
                lambda: client.transaction("t-bad", timeout_s=0),
            ):
                with pytest.raises(InvalidArgumentError):
                    bad()
            async with client.transaction("t-bad") as tx:
                with pytest.raises(InvalidArgumentError):
                    await tx.append(positions_log_of("t-bad"), b"x")
                with pytest.raises(InvalidArgumentError):
                    await tx.commit_positions("g-bad", {12: -1})
                await tx.append(12, b"fine")
            await _eventually(
                "the good one", lambda: _is(_payloads(client, 12, "committed"), [b"fine"])
            )

    trio.run(main)


def test_a_committed_reader_that_spills_reads_the_decided_range_again(
    cluster: LocalCluster,
) -> None:
    """A reader whose hold bound is a few records' bytes spills at each
    open transaction and reads the range again once the marker decides it:
    it gets what one holding everything gets, in LSN order."""
    rereads: list[tuple[int, int]] = []
    pending: list[Any] = []

    class Counted(CommittedStream):
        """Hands the view one item at a time (as a slow network would:
        here the nodes' answers all arrive at once), and counts rereads."""

        async def _next_core_items(self) -> list[Any]:
            if not pending:
                pending.extend(await super()._next_core_items())
            return [pending.pop(0)] if pending else []

        def _again_over(self, span: tuple[int, int] | None) -> None:
            if span is not None:
                rereads.append(span)
            super()._again_over(span)

    async def main() -> None:
        async with logstrand.open_client(cluster.url) as client:
            log = 13
            await client.append(log, b"p0")
            for n, commit in (("a", False), ("b", True)):
                tx = client.transaction(f"t-spill-{n}")
                await tx.__aenter__()
                for i in range(5):
                    await tx.append(log, b"%s%d" % (n.encode(), i))
                    await client.append(log, b"%s-plain%d" % (n.encode(), i))
                await (tx.commit() if commit else tx.abort())
                await tx.__aexit__(None, None, None)
            want = [b"p0"] + [b"a-plain%d" % i for i in range(5)]
            want += [x for i in range(5) for x in (b"b%d" % i, b"b-plain%d" % i)]
            await _eventually(
                "both transactions decided", lambda: _is(_payloads(client, log, "committed"), want)
            )
            spilling = Counted(client._admin, client.links, log, 1, TAIL)
            spilling.hold_max_bytes = 150
            async with spilling as reader:
                got = [i.payload async for i in reader if isinstance(i, Record)]
            assert got == want
            assert len(rereads) >= 2, rereads

    trio.run(main)

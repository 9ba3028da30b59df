"""The producer's buffer through the blocking client: threads share APPENDs,
keep their order, get their own errors; flush and close deliver; memory stays
bounded when the cluster cannot keep up."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand import Record
from logstrand.client._accumulator import BufferFullError
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster
from logstrand.types import lsn_epoch

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("producer") / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 20, LogAttributes(replication_factor=2))
        yield c


def test_threads_share_appends_and_keep_their_order(cluster: LocalCluster) -> None:
    got: dict[int, list[tuple[int, bytes]]] = {}
    with logstrand.connect(cluster.url) as client:

        def work(t: int) -> None:
            got[t] = [
                (client.append(1, b"t%d-%d" % (t, i)), b"t%d-%d" % (t, i)) for i in range(150)
            ]

        threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        records = [x for x in client.read(1) if isinstance(x, Record)]
    for mine in got.values():
        lsns = [lsn for lsn, _ in mine]
        assert lsns == sorted(lsns)  # each thread's records in its order
    acked = {lsn: payload for mine in got.values() for lsn, payload in mine}
    assert len(acked) == 16 * 150
    assert {r.lsn: r.payload for r in records} == acked  # each once, where acknowledged


def test_flush_and_close_deliver_every_accepted_record(cluster: LocalCluster) -> None:
    delivered: list[tuple[int, BaseException | None]] = []
    client = logstrand.connect(cluster.url)
    try:
        futures = [
            client.append_async(
                2, b"f%d" % i, on_delivery=lambda lsn, e: delivered.append((lsn, e))
            )
            for i in range(3000)
        ]
        assert client.flush(60) == 0
        assert all(f.done() for f in futures)
        more = [client.append_async(2, b"g%d" % i) for i in range(3000)]
    finally:
        client.close()  # delivers what was accepted, then stops
    lsns = [f.result(0) for f in futures + more]
    assert len(set(lsns)) == 6000
    assert len(delivered) == 3000
    assert all(e is None for _, e in delivered)
    with pytest.raises(logstrand.ClosedError):
        client.append_async(2, b"after close")


def test_a_record_gets_its_own_error(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        good = [client.append_async(3, b"ok%d" % i) for i in range(100)]
        bad = client.append_async(5000, b"no such log")
        more = [client.append_async(3, b"ok") for _ in range(100)]
        with pytest.raises(logstrand.NotFoundError):
            bad.result(30)
        assert all(f.result(30) > 0 for f in good + more)
        with pytest.raises(logstrand.InvalidArgumentError):
            client.append_async(3, "not bytes")  # type: ignore[arg-type]


def test_memory_stays_bounded_when_the_cluster_cannot_take_records(tmp_path: Path) -> None:
    settings = logstrand.ClientSettings(
        buffer_bytes_max=64 * 1024, max_block_ms=500, append_timeout_s=3.0
    )
    with LocalCluster(tmp_path / "c", nodes=2) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url, settings=settings) as client:
            client.append(1, b"warm")
            c.stop_node(2)  # R=2 of 2: nothing can be stored now
            futures: list[Any] = []

            def fill() -> None:
                for _ in range(100_000):
                    futures.append(client.append_async(1, b"x" * 500))
                    assert client._accumulator.bytes <= settings.buffer_bytes_max

            with pytest.raises(BufferFullError, match="buffer_bytes_max"):
                fill()
            assert len(futures) < 200  # it blocked, then failed: it never grew
            assert client.flush(30) == 0  # the accepted ones end (timed out)
            assert all(f.exception(0) is not None for f in futures)


def test_a_sequencer_killed_under_16_threads_loses_reorders_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    """Sixteen threads append one record at a time (sync ``append`` and
    ``append_async``) while the log's sequencer node is SIGKILLed: every
    acknowledged record is read back exactly once, each thread's records in
    the order it appended them, and no record is stored twice (idempotence
    through the producer's buffer and its retries)."""
    with LocalCluster(tmp_path / "c", nodes=4) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            client.append(1, b"warm")
            victim = client.sequencer_node(1)
            assert victim is not None
            acked: dict[int, list[tuple[int, bytes]]] = {t: [] for t in range(16)}
            failed: list[BaseException] = []
            stop = threading.Event()

            def work(t: int) -> None:
                i = 0
                while not stop.is_set() and i < 2000:
                    payload = b"t%d-%d" % (t, i)
                    i += 1
                    try:
                        if t % 2:
                            lsn = client.append(1, payload)
                        else:
                            lsn = client.append_async(1, payload).result(60)
                    except logstrand.LogstrandError as exc:
                        failed.append(exc)
                        continue
                    acked[t].append((lsn, payload))

            threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
            for t in threads:
                t.start()
            time.sleep(1.5)
            before = sum(map(len, acked.values()))
            c.kill_node(victim)
            time.sleep(4.0)
            stop.set()
            for t in threads:
                t.join(120)
            assert not any(t.is_alive() for t in threads)
            after = sum(map(len, acked.values()))
            assert before > 100
            assert after > before + 100  # appends went on after the kill
            records = [x for x in client.read(1) if isinstance(x, Record)]
    all_acked = [lsn for mine in acked.values() for lsn, _ in mine]
    assert lsn_epoch(max(all_acked)) > lsn_epoch(min(all_acked))  # a failover happened
    for mine in acked.values():
        lsns = [lsn for lsn, _ in mine]
        assert lsns == sorted(lsns)  # each thread's records in its order
    payloads = [r.payload for r in records]
    assert len(payloads) == len(set(payloads))  # nothing stored twice
    stored = {r.payload: r.lsn for r in records}
    for mine in acked.values():
        for lsn, payload in mine:
            assert stored.get(payload) == lsn  # every acknowledged record, where it was acked
    # Within each thread, stored records follow the thread's order too.
    for t in range(16):
        mine = sorted((lsn, p) for p, lsn in stored.items() if p.startswith(b"t%d-" % t))
        numbers = [int(p.split(b"-")[1]) for _, p in mine]
        assert numbers == sorted(numbers)

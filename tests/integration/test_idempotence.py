"""Idempotent appends with real node processes: a retried batch is never
stored twice, across pauses and SIGKILLed sequencers; batches in flight keep
their order; an expired producer gets a clear error (docs/delivery.md)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest
import trio

import logstrand
from logstrand import LSN_OLDEST, Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import DuplicateAppendError, ProducerError
from logstrand.logsdb import LogsDB
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

RETRYING = logstrand.ClientSettings(append_timeout_s=60, append_attempt_timeout_s=0.2)


def _log(c: LocalCluster, replication: int = 2) -> None:
    with open_epoch_store(c.url) as store:
        store.create_logs(1, 1, LogAttributes(replication_factor=replication))


async def _payloads(client: logstrand.AsyncClient) -> list[bytes]:
    tail = await client.tail_lsn(1)
    out: list[bytes] = []
    async with client.read(1, LSN_OLDEST, tail) as reader:
        async for x in reader:
            if isinstance(x, Record):
                assert x.payload is not None
                out.append(x.payload)
    return out


async def _append_while_paused(c: LocalCluster, idempotent: bool, tag: bytes) -> int:
    """Pause the sequencer's node while one append is out: the client gives
    up on each attempt after 0.2 s and sends the batch again, to the same
    node.  Returns how many times the payload is in the log afterwards."""
    settings = (
        RETRYING
        if idempotent
        else logstrand.ClientSettings(
            append_timeout_s=60, append_attempt_timeout_s=0.2, idempotent=False
        )
    )
    async with logstrand.open_client(c.url, settings=settings) as client:
        first = await client.append(1, b"warm-" + tag)
        owner = c.sequencer_of(1, lsn_epoch(first))
        c.pause_node(owner)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.append, 1, tag)
                await trio.sleep(1.0)  # four or five attempts queue up at the node
                c.resume_node(owner)
        finally:
            c.resume_node(owner)
        return Counter(await _payloads(client))[tag]


async def test_a_retried_append_is_stored_once_and_without_idempotence_twice(
    tmp_path: Path,
) -> None:
    """The attempts that queued behind the paused node all reach the
    sequencer once it resumes: without idempotence each is stored (the
    at-least-once duplicates), with it the first is and the others get its
    LSN."""
    with LocalCluster(tmp_path) as c:
        _log(c)
        assert await _append_while_paused(c, idempotent=False, tag=b"off") > 1
        assert await _append_while_paused(c, idempotent=True, tag=b"on") == 1


def test_every_payload_exactly_once_across_three_sigkilled_sequencers(tmp_path: Path) -> None:
    """Two clients append unique payloads while the sequencer's node is
    SIGKILLed three times (and started again); appends are retried through
    each failover.  Every acknowledged payload is in the log exactly once,
    at the LSN it was acknowledged with, and nothing else is."""
    with LocalCluster(tmp_path, nodes=4) as c:
        _log(c)
        acked: dict[bytes, int] = {}
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                with logstrand.connect(c.url, settings=RETRYING) as client:
                    i = 0
                    while not stop.is_set():
                        batch = [b"w%d-%d-%d" % (w, i, k) for k in range(5)]
                        lsns = client.append_batch(1, batch)
                        acked.update(zip(batch, lsns, strict=True))
                        i += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        try:
            with logstrand.connect(c.url) as admin:
                for _ in range(3):
                    time.sleep(0.7)
                    epoch = lsn_epoch(admin.tail_lsn(1))
                    owner = c.sequencer_of(1, epoch)
                    c.kill_node(owner)
                    time.sleep(0.3)
                    c.start_node(owner)
                time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors
        with logstrand.connect(c.url) as client:
            got = [
                (x.lsn, x.payload)
                for x in client.read(1, LSN_OLDEST, client.tail_lsn(1))
                if isinstance(x, Record)
            ]
        count = Counter(p for _, p in got)
        assert len(acked) > 100
        assert max(count.values()) == 1, [p for p, n in count.items() if n > 1][:5]
        at = {p: lsn for lsn, p in got}
        assert all(at.get(p) == lsn for p, lsn in acked.items())
        # Whatever was appended but not acknowledged (the last batch when the
        # writers stopped is acknowledged too) is nothing else.
        assert set(at) == set(acked)


def test_batches_in_flight_keep_their_order_across_a_failover(tmp_path: Path) -> None:
    """One client with two batches in flight at a time appends while its
    sequencer is killed: the batches are in the log in the order they were
    numbered (each batch's producer number, in its stored header, rises with
    its LSN), and every record's LSN follows the order of the appends."""

    async def run(c: LocalCluster) -> list[int]:
        settings = logstrand.ClientSettings(
            append_timeout_s=60, append_attempt_timeout_s=0.3, inflight_batches_per_log=2
        )
        lsns: list[int] = [0] * 3000
        async with logstrand.open_client(c.url, settings=settings) as client:
            # Once the client knows the log and has its producer id, an
            # append waits for nothing before it joins the log's queue.
            await client.append(1, b"warm")

            async def one(i: int) -> None:
                lsns[i] = await client.append(1, b"%06d" % i)

            async with trio.open_nursery() as nursery:
                for i in range(len(lsns)):
                    nursery.start_soon(one, i)
                    await trio.lowlevel.checkpoint()  # appends are made in order of i
                    if i == 1000:
                        first = await client.append(1, b"probe")
                        c.kill_node(c.sequencer_of(1, lsn_epoch(first)))
        return lsns

    with LocalCluster(tmp_path, nodes=4) as c:
        _log(c)
        lsns = trio.run(run, c)
        assert len(set(lsns)) == len(lsns)
        assert lsns == sorted(lsns), "a later append got a lower LSN"
        assert lsn_epoch(lsns[-1]) > lsn_epoch(lsns[0])
        for n in list(c.procs):
            c.stop_node(n)
        numbered: list[tuple[int, int, int]] = []
        for n in c.nodes:
            with LogsDB.open(c.nodes[n].data_dir) as db:
                start = LSN_OLDEST
                while start <= lsns[-1]:
                    got = db.read_packed(1, start, lsns[-1])
                    numbered += [(b.first_lsn, *b.producer) for b in got.batches if b.producer]
                    start = got.scanned_to + 1
        by_lsn = sorted(set(numbered))
        for producer in {p for _, p, _ in by_lsn}:
            seqs = [s for _, p, s in by_lsn if p == producer]
            assert seqs == sorted(seqs), f"producer {producer}: numbers out of LSN order"


def test_an_expired_producer_gets_a_clear_error_then_appends_again(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, node_args=("--producer-expiry", "1s")) as c:
        _log(c)
        with logstrand.connect(c.url) as client:
            client.append(1, b"a")
            client.append(1, b"b")
            time.sleep(1.5)
            with pytest.raises(ProducerError, match="unknown to log 1"):
                client.append(1, b"c")
            # The next append starts a new numbering under a fresh id.
            lsn = client.append(1, b"d")
            got = [x.payload for x in client.read(1, LSN_OLDEST, lsn) if isinstance(x, Record)]
        assert got == [b"a", b"b", b"d"]


def test_a_fixed_producer_id_run_again_stores_nothing_twice(tmp_path: Path) -> None:
    """What a Spark task run again does: a second client under the same fixed
    producer id appends the same batches from number 0.  Those the log still
    holds get their LSNs back; older ones raise DuplicateAppendError; the
    first new batch is stored."""
    fixed = logstrand.ClientSettings(producer_id=(1 << 63) | 42)
    with LocalCluster(tmp_path) as c:
        _log(c)
        with logstrand.connect(c.url, settings=fixed) as first:
            lsns = [first.append_batch(1, [b"r%d" % i]) for i in range(8)]
        with logstrand.connect(c.url, settings=fixed) as again:
            for i in range(3):  # numbers 0..2: below the window of the last 5
                with pytest.raises(DuplicateAppendError):
                    again.append_batch(1, [b"r%d" % i])
            for i in range(3, 8):
                assert again.append_batch(1, [b"r%d" % i]) == lsns[i]
            new = again.append_batch(1, [b"r8"])
            got = [x.payload for x in again.read(1, LSN_OLDEST, new[0]) if isinstance(x, Record)]
        assert got == [b"r%d" % i for i in range(9)]

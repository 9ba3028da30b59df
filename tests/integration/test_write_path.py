"""Appends against real node processes: LSNs, copies, failures, bad input."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
import trio

import logstrand
from logstrand import InvalidArgumentError, NotFoundError, Status, lsn_epoch
from logstrand.batch import Codec, PackedBatch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.logsdb import LogsDB
from logstrand.net import connect, handshake_sync
from logstrand.placement import murmur2
from logstrand.records import RecordFlags
from logstrand.testing import LocalCluster
from logstrand.types import Record
from logstrand.wire import Append, AppendMany, AppendManyReply, AppendReply, Ping

if TYPE_CHECKING:
    from pathlib import Path


async def test_concurrent_clients_get_unique_increasing_lsns(cluster: LocalCluster) -> None:
    per_task: dict[int, list[int]] = {}

    async def writer(client: logstrand.AsyncClient, task: int) -> None:
        got = per_task.setdefault(task, [])
        for i in range(150):
            got.append(await client.append(3, b"task %d rec %d" % (task, i)))

    async with logstrand.open_client(cluster.url) as c1, logstrand.open_client(cluster.url) as c2:
        async with trio.open_nursery() as nursery:
            for t in range(8):
                nursery.start_soon(writer, c1 if t % 2 else c2, t)
        batch = await c1.append_batch(3, [b"b%d" % i for i in range(500)])
    every = [lsn for got in per_task.values() for lsn in got] + batch
    assert len(set(every)) == len(every) == 8 * 150 + 500
    for got in per_task.values():
        assert got == sorted(got)
    assert batch == list(range(batch[0], batch[0] + 500))


def test_blocking_client_single_batch_and_async(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        a = client.append(4, b"one")
        b = client.append_batch(4, [b"two", b"three"])
        futures = [client.append_async(4, b"f%d" % i) for i in range(200)]
        lsns = [f.result(timeout=30) for f in futures]
    assert a < b[0] < b[1]
    assert len(set(lsns)) == 200
    assert min(lsns) > b[1]


def test_appends_to_a_named_range_go_where_kafka_puts_the_key(cluster: LocalCluster) -> None:
    """``client.append("orders", payload, key=k)``: the log Kafka's default
    partitioner picks for the key (partition i is log 400 + i), records
    without a key to the logs in turn; a name made after the client started
    is found; an unknown one is NOTFOUND."""
    with logstrand.connect(cluster.url) as client:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(400, 403, LogAttributes(replication_factor=2), name="orders")
        keys = [b"k%d" % i for i in range(40)]
        one = {k: client.append("orders", b"v-" + k, key=k) for k in keys[:20]}
        futures = {k: client.append_async("orders", b"v-" + k, key=k) for k in keys[20:]}
        batch = client.append_batch("orders", [b"b-" + k for k in keys], keys=keys)
        unkeyed = [client.log_of("orders") for _ in range(8)]
        with pytest.raises(NotFoundError, match="no log range is named 'payments'"):
            client.append("payments", b"x", key=b"k")
        found: dict[bytes, list[tuple[int, int]]] = {}
        for log in range(400, 404):
            for item in client.read(log):
                if isinstance(item, Record):
                    found.setdefault(item.key, []).append((log, item.lsn))
    expected = {k: 400 + (murmur2(k) & 0x7FFFFFFF) % 4 for k in keys}
    assert len(set(expected.values())) > 1  # the keys spread over the range
    lsns = {**one, **{k: f.result(timeout=30) for k, f in futures.items()}}
    for i, k in enumerate(keys):
        assert found[k] == [(expected[k], lsns[k]), (expected[k], batch[i])], k
    assert sorted(unkeyed) == [400, 400, 401, 401, 402, 402, 403, 403]


def test_unknown_log_and_bad_payloads_fail_clearly(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        with pytest.raises(NotFoundError) as info:
            client.append(5000, b"x")
        assert info.value.status is Status.NOTFOUND
        with pytest.raises(InvalidArgumentError) as too_big:
            client.append(1, b"x" * (1024 * 1024 + 1))
        assert too_big.value.status is Status.TOOBIG
        # A payload None is a record without one (Kafka's null value) on any log.
        empty = client.append(1, None)
        assert [r.payload for r in client.read(1, empty, empty)] == [None]
        with pytest.raises(InvalidArgumentError) as nokey:
            client.append(200, b"v")
        assert nokey.value.status is Status.NOKEY
        with pytest.raises(InvalidArgumentError) as long_key:
            client.append(200, b"v", key=b"k" * 70_000)
        assert long_key.value.status is Status.TOOBIG
        assert client.append(200, b"v", key=b"k") > 0
        assert client.append(200, None, key=b"k") > 0  # a tombstone


async def test_node_refuses_oversized_payload_itself(cluster: LocalCluster) -> None:
    # A client that does not check (its limit set higher) still gets TOOBIG.
    settings = logstrand.ClientSettings(payload_bytes_max=4 * 1024 * 1024)
    async with logstrand.open_client(cluster.url, settings=settings) as client:
        with pytest.raises(InvalidArgumentError) as info:
            await client.append(1, b"x" * (2 * 1024 * 1024))
    assert info.value.status is Status.TOOBIG
    # The node also refuses a key LogsDB cannot store, before any STORE: the
    # rest of the group commit it would have landed in is unharmed.  Sent as a
    # raw APPEND: the client would refuse it itself.
    async with logstrand.open_client(cluster.url) as client:
        await client.append(200, b"first", key=b"k")
        owner = client.sequencer_node(200)
        assert owner is not None
        batch = PackedBatch.for_append([b"k", b"k" * 70_000], [b"a", b"b"])
        reply = await client.ask_node(owner, lambda rid: Append(rid, 200, batch))
        assert isinstance(reply, AppendReply)
        assert reply.status == Status.TOOBIG
        assert await client.append(200, b"fine", key=b"k") > 0


async def test_one_request_carries_many_logs_batches_each_answered_for_itself(
    cluster: LocalCluster,
) -> None:
    """An ``AppendMany`` to a node: each entry is taken as its own APPEND would
    be, and answered for itself (OK, REDIRECTED, NOTFOUND, TOOBIG) in one reply."""
    async with logstrand.open_client(cluster.url) as client:
        owner = client.sequencer_node(30)
        assert owner is not None
        mine = [log for log in range(30, 60) if client.sequencer_node(log) == owner][:2]
        other = next(log for log in range(30, 60) if client.sequencer_node(log) != owner)
        ok = PackedBatch.for_append([None], [b"together"])
        too_big = PackedBatch.for_append([b"k" * 70_000], [b"b"])
        logs = (mine[0], other, 1_000_000, mine[1], mine[0])
        batches = (ok, ok, ok, too_big, ok)
        reply = await client.ask_node(owner, lambda rid: AppendMany(rid, logs, batches))
        assert isinstance(reply, AppendManyReply)
        assert [Status(s) for s in reply.statuses] == [
            Status.OK,
            Status.REDIRECTED,
            Status.NOTFOUND,
            Status.TOOBIG,
            Status.OK,
        ]
        assert reply.redirects[1] == client.sequencer_node(other)
        assert reply.first_lsns[4] == reply.first_lsns[0] + 1  # one log, in entry order
        got = [
            r.payload
            async for r in client.read(mine[0], 1, reply.first_lsns[4])
            if isinstance(r, Record)
        ]
        assert got == [b"together", b"together"]
        empty = await client.ask_node(owner, lambda rid: AppendMany(rid, (), ()))
        assert isinstance(empty, AppendManyReply)
        assert empty.statuses == ()


async def test_against_nodes_of_protocol_3_appends_go_alone_and_tails_log_by_log(
    cluster: LocalCluster,
) -> None:
    """A node that speaks protocol 3 knows neither ``AppendMany`` nor
    ``GetTails``: the client sends it each batch alone and asks it log by log
    (here the client's links are told they speak 3)."""
    sent: list[str] = []
    async with logstrand.open_client(cluster.url) as client:
        for node in cluster.nodes:
            await client.ask_node(node, Ping)  # opens the link
            link = client.links.open_link(node)
            assert link is not None
            link.conn.protocol = 3
            send = link.conn.send

            async def noting(msg: object, send: Any = send) -> None:
                sent.append(type(msg).__name__)
                await send(msg)

            link.conn.send = noting  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            for log in range(40, 60):
                for _ in range(3):
                    nursery.start_soon(client.append, log, b"v3")
        tails = await client.tail_lsns(range(40, 60))
        assert tails == {log: await client.tail_lsn(log) for log in range(40, 60)}
        assert all(tails[log] > 0 for log in range(40, 60))
    assert "Append" in sent
    assert "AppendMany" not in sent
    assert "GetTails" not in sent


def _send_raw(host: str, port: int, data: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x05hello",  # a frame that is not CBOR
        b"GET / HTTP/1.1\r\n\r\n",  # the wrong protocol (a huge length prefix)
        struct.pack(">I", 64 * 1024 * 1024) + b"x" * 100,  # an oversized frame
        b"\xff" * 10_000,
    ],
)
def test_garbage_closes_the_connection_and_the_node_serves_on(
    cluster: LocalCluster, garbage: bytes
) -> None:
    for cfg in cluster.nodes.values():
        assert _send_raw(cfg.host, cfg.port, garbage) == b""  # closed, nothing answered
        assert handshake_sync(cfg.host, cfg.port, cluster.cluster)
    with logstrand.connect(cluster.url) as client:
        assert client.append(5, b"still here") > 0


async def test_garbage_after_handshake_closes_only_that_connection(cluster: LocalCluster) -> None:
    cfg = cluster.nodes[1]
    conn = await connect(cfg.host, cfg.port, cluster=cluster.cluster)
    await conn.stream.send_all(b"\x00\x00\x00\x03\xff\xff\xff")
    with trio.fail_after(5):
        assert await conn.stream.receive_some(100) == b""
    await conn.aclose()
    conn = await connect(cfg.host, cfg.port, cluster=cluster.cluster)
    await conn.aclose()


async def test_append_to_a_non_sequencer_node_is_redirected(cluster: LocalCluster) -> None:
    async with logstrand.open_client(cluster.url) as client:
        await client.append(6, b"x")
        owner = client.sequencer_node(6)
        other = next(n for n in cluster.nodes if n != owner)
        cfg = cluster.nodes[other]
        conn = await connect(cfg.host, cfg.port, cluster=cluster.cluster)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.writer)
            await conn.send(Append(77, 6, PackedBatch.for_append([None], [b"x"])))
            reply = await conn.receive_one()
            nursery.cancel_scope.cancel()
        await conn.aclose()
    assert isinstance(reply, AppendReply)
    assert (reply.request_id, reply.status, reply.redirect) == (77, Status.REDIRECTED, owner)


def test_metrics_endpoint(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        client.append_batch(7, [b"m"] * 10)
    text = ""
    for cfg in cluster.nodes.values():
        with urllib.request.urlopen(f"http://127.0.0.1:{cfg.metrics_port}/metrics") as r:
            text += r.read().decode()
    assert "logstrand_store_records_total" in text
    assert "logstrand_group_commits_total" in text
    stored = sum(
        float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("logstrand_store_records_total")
    )
    assert stored >= 20  # ten records, two copies each


def test_every_acknowledged_record_has_r_copies_on_distinct_nodes(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
            store.create_logs(2, 2, LogAttributes(replication_factor=3, durability="fsync"))
        with logstrand.connect(c.url) as client:
            acked = {1: client.append_batch(1, [b"r%d" % i for i in range(300)])}
            acked[2] = [client.append(2, b"s%d" % i) for i in range(50)]
    # The cluster is stopped: open every node's LogsDB and count the copies.
    copies: dict[tuple[int, int], list[tuple[int, tuple[int, ...]]]] = {}
    for node in (1, 2, 3):
        with LogsDB.open(tmp_path / "c" / f"node{node}") as db:
            for log in (1, 2):
                for rec in db.iter_records(log):
                    copies.setdefault((log, rec.lsn), []).append((node, rec.copyset))
    for log, r in ((1, 2), (2, 3)):
        for lsn in acked[log]:
            holders = copies[(log, lsn)]
            nodes = [n for n, _ in holders]
            assert len(set(nodes)) >= r, (log, lsn, holders)
            # Each copy names the nodes of its copyset, which hold it.
            for _, copyset in holders:
                assert len(copyset) == r
                assert set(copyset) <= set(nodes)


def test_appends_go_on_with_a_storage_node_killed(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            owner = c.sequencer_of(1, lsn_epoch(client.append(1, b"before")))
            victim = next(n for n in c.nodes if n != owner)
            c.kill_node(victim)
            lsns = [client.append(1, b"after %d" % i) for i in range(50)]
            assert lsns == sorted(lsns)
            assert {lsn_epoch(x) for x in lsns} == {1}  # same sequencer, same epoch


def test_sequencer_node_killed_appends_resume_in_a_higher_epoch(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            first = client.append(1, b"before")
            c.kill_node(c.sequencer_of(1, lsn_epoch(first)))
            t0 = time.monotonic()
            after = client.append(1, b"after")  # retried until a new sequencer takes over
            took = time.monotonic() - t0
            more = client.append_batch(1, [b"x"] * 10)
        assert lsn_epoch(after) > lsn_epoch(first)
        assert after < more[0]
        assert took < 10


def test_dev_up_prints_ready_and_stops_its_nodes(tmp_path: Path) -> None:
    """With --kafka, also the Kafka bootstrap line, and every node a broker;
    and the console's address, where it answers."""
    argv = ["dev", "up", "--nodes", "2", "--dir", str(tmp_path), "--kafka"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "logstrand", *argv], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        kafka = proc.stdout.readline().strip()
        assert kafka.startswith("kafka bootstrap 127.0.0.1:")
        shown = proc.stdout.readline().strip()
        assert shown.startswith("console http://127.0.0.1:")
        assert shown.endswith("/")
        with urllib.request.urlopen(shown.split(" ")[1] + "api/status", timeout=15) as r:
            assert len(json.loads(r.read())["nodes"]) == 2
        env_line = proc.stdout.readline().strip()
        assert env_line.startswith(f"environment: . {tmp_path / 'env'} ")
        line = proc.stdout.readline().strip()
        assert line.startswith("ready sqlite://")
        url = line.split(" ", 1)[1]
        # DIR/env aims a shell at this cluster and at no other: its URL and
        # bootstrap set, a secure cluster's credentials unset.
        sourced = subprocess.run(
            ["bash", "-c", f". {tmp_path / 'env'} && env"],
            env={"LOGSTRAND_CA": "/elsewhere/ca.pem", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        assert f"LOGSTRAND_URL={url}" in sourced
        assert f"KAFKA_BOOTSTRAP={kafka.split(' ')[2]}" in sourced
        assert not [v for v in sourced if v.startswith("LOGSTRAND_CA=")]
        with open_epoch_store(url) as store:
            assert len(store.alive_nodes()) == 2
            store.create_logs(1, 1, LogAttributes(replication_factor=2), name="hi")
        with logstrand.connect(url) as client:
            assert client.append(1, b"hi") > 0
        bootstrap = kafka.split(" ")[2]
        assert len(bootstrap.split(",")) == 2
        out = subprocess.run(
            ["kcat", "-b", bootstrap, "-C", "-t", "hi", "-e", "-f", "%o %s\n"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (out.returncode, out.stdout) == (0, "0 hi\n"), out.stderr
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read().strip().endswith("stopped")
        with open_epoch_store(url) as store:
            deadline = time.monotonic() + 10
            while store.alive_nodes() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.alive_nodes() == frozenset()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_logs_round_trip_and_nodes_store_the_client_bytes(
    tmp_path: Path, codec: str
) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2, compression=codec))
            store.create_logs(2, 2, LogAttributes(replication_factor=2))
        payloads = [b'{"user": %d, "event": "click", "page": "/home"}' % i for i in range(2000)]
        with logstrand.connect(c.url) as client:
            lsns = client.append_batch(1, payloads)
            client.append_batch(2, payloads)
            got = [r.payload for r in client.read(1, until=lsns[-1]) if isinstance(r, Record)]
            arrow = list(client.read_arrow(1, until=lsns[-1]))
        assert got == payloads
        assert [p for b in arrow for p in b.column("payload").to_pylist()] == payloads
    # Every node keeps the client's compressed bytes: its batches are smaller.
    sizes = {1: 0, 2: 0}
    for node in (1, 2, 3):
        with LogsDB.open(tmp_path / "c" / f"node{node}") as db:
            for log in (1, 2):
                batches = db.read_packed(log).batches
                sizes[log] += sum(len(b.data) for b in batches)
                if log == 1:
                    # A stopping node's bridge (a hand-off) carries no payload to compress.
                    data = [b for b in batches if not b.flag_bits & RecordFlags.BRIDGE]
                    assert {b.codec for b in data} <= {Codec.parse(codec)}
    assert 0 < sizes[1] < sizes[2] / 2, sizes


async def test_a_batch_changed_between_client_and_sequencer_is_refused(
    cluster: LocalCluster,
) -> None:
    async with logstrand.open_client(cluster.url) as client:
        await client.append(1, b"warm up")
        owner = client.sequencer_node(1)
        assert owner is not None
        good = PackedBatch.for_append([None], [b"payload"])
        bad = bytearray(good.data)
        bad[-2] ^= 0x01  # a payload byte: the client's checksum no longer matches
        reply = await client.ask_node(
            owner, lambda rid: Append(rid, 1, PackedBatch.parse(bytes(bad)))
        )
        assert isinstance(reply, AppendReply)
        assert reply.status == Status.CHECKSUM_MISMATCH
        assert await client.append(1, b"next") > 0


def test_the_client_alone_imports_neither_rocksdict_nor_numpy(cluster: LocalCluster) -> None:
    """A program that only appends and reads pays for neither the node's
    storage engine nor the columnar reads (make run installs neither extra)."""
    code = (
        "import sys, logstrand\n"
        f"with logstrand.connect({cluster.url!r}) as c:\n"
        "    lsn = c.append(1, b'light')\n"
        "    assert [r.payload for r in c.read(1, lsn, lsn)] == [b'light']\n"
        "heavy = {'numpy', 'rocksdict', 'pyarrow', 'pandas', 'pyspark'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_append_from_a_pipe_writes_each_line_as_it_arrives(cluster: LocalCluster) -> None:
    """`tail -f x | logstrand append LOG`: a line is in the log while the
    pipe is still open; keys come from each line."""
    env = {**cluster.client_env(), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "logstrand", "append", "7"]
    with logstrand.connect(cluster.url) as client:
        start = client.tail_lsn(7) + 1
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"first line\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 30
            got: list[bytes] = []
            while not got and time.monotonic() < deadline:
                tail = client.tail_lsn(7)
                if tail >= start:
                    got = [r.payload for r in client.read(7, start, tail) if isinstance(r, Record)]
                time.sleep(0.1)
            assert got == [b"first line"]  # before EOF
            stdout, _ = proc.communicate(b"second\nthird\n", timeout=30)
            assert proc.returncode == 0
            out = stdout.decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert "appended 3 records to log 7" in out
        tail = client.tail_lsn(7)
        assert [r.payload for r in client.read(7, start, tail) if isinstance(r, Record)] == [
            b"first line", b"second", b"third"
        ]  # fmt: skip
        # Keys from each line: split at a separator, or a JSON field.
        for args, lines in (
            (["--key-separator", ":"], b"k1:v1\nk2:v:2\n"),
            (["--key-field", "id"], b'{"id": "k1", "v": 3}\n{"id": 7}\n'),
        ):
            done = subprocess.run([*argv[:-1], "200", *args], input=lines, env=env,
                                  capture_output=True, timeout=60)  # fmt: skip
            assert done.returncode == 0, done.stderr
        items = [(r.key, r.payload) for r in client.read(200) if isinstance(r, Record)]
        # Log 200 is compacted: a pass may already have removed (k1, v1),
        # which the later record of k1 supersedes.
        assert items[-3:] == [(b"k2", b"v:2"), (b"k1", b'{"id": "k1", "v": 3}'),
                              (b"7", b'{"id": 7}')]  # fmt: skip
        assert items[-4] == (b"k1", b"v1") or (b"k1", b"v1") not in items
        bad = subprocess.run([*argv[:-1], "200", "--key-separator", ":"], input=b"k3:ok\nnone\n",
                             env=env, capture_output=True, timeout=60)  # fmt: skip
        assert bad.returncode == 2
        assert b"line 2 has no ':'" in bad.stderr
        assert b"appended 1 records" in bad.stdout  # the line before it is in


def test_an_asyncio_program_uses_the_thread_backed_client(cluster: LocalCluster) -> None:
    """asyncio, not trio: appends as futures of the blocking client, awaited
    with ``asyncio.wrap_future``; reads in an executor (docs/write-path.md).
    Appends in flight together are not ordered among themselves."""
    import asyncio

    async def main() -> tuple[dict[int, bytes], list[Record]]:
        with logstrand.connect(cluster.url) as client:
            payloads = [b"aio %d" % i for i in range(200)]
            futures = [client.append_async(8, p) for p in payloads]
            lsns = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
            loop = asyncio.get_running_loop()
            items = await loop.run_in_executor(
                None, lambda: list(client.read(8, min(lsns), max(lsns)))
            )
            return dict(zip(lsns, payloads, strict=True)), [
                r for r in items if isinstance(r, Record)
            ]

    appended, read = asyncio.run(main())
    assert [(r.lsn, r.payload) for r in read] == sorted(appended.items())


def test_arrow_rows_append_in_order_and_read_back_as_appended(cluster: LocalCluster) -> None:
    """``append_arrow``: a table's rows, keys and tombstones, in several
    APPENDs, each span's LSNs consecutive; bad columns refused before
    anything is sent."""
    import numpy as np
    import pyarrow as pa

    payloads = [b"row %d " % i + b"." * (i % 50) for i in range(3000)]
    keys = [None if i % 7 == 0 else b"k%d" % (i % 40) for i in range(3000)]
    table = pa.table({"payload": payloads, "key": keys})
    settings = logstrand.ClientSettings(batch_bytes_max=20_000)
    with logstrand.connect(cluster.url, settings=settings) as client:
        lsns = client.append_arrow(45, table)
        assert lsns.dtype == np.uint64
        assert len(lsns) == 3000
        assert (np.diff(lsns.astype(np.int64)) > 0).all()
        assert len({lsn_epoch(int(x)) for x in lsns}) == 1
        got = [r for r in client.read(45, int(lsns[0]), int(lsns[-1])) if isinstance(r, Record)]
        assert [r.lsn for r in got] == lsns.tolist()
        assert [r.payload for r in got] == payloads
        assert [r.key for r in got] == keys
        # A compacted log takes tombstones (null payloads) with their keys.
        dead = pa.record_batch({"payload": pa.array([b"v", None], pa.binary()), "key": ["a", "a"]})
        first, second = client.append_arrow(245, dead).tolist()
        recs = [r for r in client.read(245, first, until=second) if isinstance(r, Record)]
        assert [(r.key, r.payload) for r in recs] == [(b"a", b"v"), (b"a", None)]
        tail = client.tail_lsn(46)
        with pytest.raises(InvalidArgumentError, match="column 'payload' must be binary"):
            client.append_arrow(46, pa.record_batch({"payload": [1, 2]}))
        with pytest.raises(InvalidArgumentError, match="exceeds the limit") as err:
            client.append_arrow(46, pa.record_batch({"payload": [b"a", b"x" * (2 << 20)]}))
        assert err.value.status == Status.TOOBIG
        with pytest.raises(NotFoundError):
            client.append_arrow(9999, pa.record_batch({"payload": [b"a"]}))
        assert client.tail_lsn(46) == tail

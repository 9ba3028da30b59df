"""Micro-measurements behind the explanations in docs/performance.md.

    python bench/micro.py [--packed]

(``--packed``: only the packed-batch measurements, no servers)

- packing, checking and decoding a batch of 100 B records (no RocksDB), its
  parse alone (header and lengths), and
  a client's one-record batch, built, and built then parsed back (as it was);
- a Ping/Pong round trip through the project's connection code to a node process;
- append latency with the node and the client in one trio loop (one process, R=1),
  to tell Python work from cross-process wake-ups;
- one LogsDB write of a 100 B record back to back, and after the process slept
  0.5, 2 and 4 ms (what a node that waits for the next sequential append pays).

``--idle``: only the last one.  ``--scopes``: only what entering and leaving a
trio cancel scope costs, bare and with a deadline (the client made three per
batch before issue 56).  ``--offset-map``: only what a compaction pass's first
200 keys cost in a new 64 MiB offset map (numpy gives it huge pages) against a
map sized to them (docs/compaction.md), in thread CPU time, five new maps of
each, as each pass made a new one.  ``--wire``: only what framing a
node's reply of four 1 MiB batches costs (``wire.encode_frame``, which joins
big byte strings once) against cbor2's encoder of the same message, and a
CRC32C of 1 MiB (``google_crc32c``, what a batch's body check costs).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import timeit

import trio

import logstrand
from logstrand.batch import PackedBatch, make_batch
from logstrand.epochstore import LogAttributes, NodeConfig, open_epoch_store
from logstrand.net import connect
from logstrand.storage import Node
from logstrand.testing import LocalCluster, free_port
from logstrand.wire import Ping


def codec() -> None:
    n = 1000
    lsns, payloads = list(range(1, n + 1)), [b"p" * 100] * n
    t0 = time.perf_counter()
    for _ in range(200):
        pb = make_batch(lsns, payloads, timestamps_ms=1, wave=1, copyset=(1, 2))
    enc = 200 * n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(200):
        got = PackedBatch.parse(pb.data)
        assert got.body_ok()
        got.keys_payloads()
    dec = 200 * n / (time.perf_counter() - t0)
    print(f"packed batch of 100 B records: pack {enc:,.0f} records/s; check+decode {dec:,.0f}")
    # What a node pays for each stored batch it serves, and a reader for each
    # it receives, before any record is touched: the header and the lengths.
    runs = [
        min(timeit.repeat(lambda: PackedBatch.parse(pb.data), number=2000, repeat=3)) / 2000 * 1e6
        for _ in range(5)
    ]
    print(f"parse (header and lengths) of {n} x 100 B: {statistics.median(runs):.1f} us")
    restamp()
    one_record()


def one_record() -> None:
    """A client's one-record batch (``for_append``), beside what building it
    cost when it was parsed back from its own bytes (the same batch, then
    ``parse`` of its bytes): what each ``append_async`` of one record pays."""

    def built() -> object:
        return PackedBatch.for_append([None], [b"p" * 100])

    def parsed_back() -> object:
        return PackedBatch.parse(PackedBatch.for_append([None], [b"p" * 100]).data)

    for name, fn in (("built", built), ("built, then parsed back", parsed_back)):
        runs = [min(timeit.repeat(fn, number=2000, repeat=3)) / 2000 * 1e6 for _ in range(5)]
        print(f"one-record batch for an append, {name}: {statistics.median(runs):.1f} us")


def restamp() -> None:
    """A sequencer's work per STORE wave: a new header in front of the client's body."""
    for n, size in ((1000, 100), (100, 10 * 1024)):
        pb = make_batch(list(range(n)), [b"p" * size] * n, timestamps_ms=0)

        def one(pb: PackedBatch = pb) -> object:
            return pb.restamp(first_lsn=(1 << 32) | 1, timestamp_ms=5, wave=1, copyset=(1, 2))

        runs = [min(timeit.repeat(one, number=200, repeat=3)) / 200 * 1e6 for _ in range(5)]
        print(f"restamp {n} x {size} B: {statistics.median(runs):.1f} us (median of 5)")


async def ping(cluster: LocalCluster) -> None:
    cfg = cluster.nodes[1]
    conn = await connect(cfg.host, cfg.port, cluster=cluster.cluster)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.writer)
        lat = []
        for i in range(3000):
            t0 = time.perf_counter()
            await conn.send(Ping(i))
            await conn.receive_one()
            lat.append(time.perf_counter() - t0)
        nursery.cancel_scope.cancel()
    lat.sort()
    print(f"Ping/Pong to a node process: p50 {lat[1500] * 1e3:.3f} ms")


async def in_process(url: str) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(Node(url, 1).run)
        async with logstrand.open_client(url) as client:
            await client.append(1, b"w")
            lat = []
            for _ in range(3000):
                t0 = time.perf_counter()
                await client.append_batch(1, [b"z" * 100])
                lat.append(time.perf_counter() - t0)
        nursery.cancel_scope.cancel()
    lat.sort()
    print(f"append, node and client in one process (R=1): p50 {lat[1500] * 1e3:.3f} ms")


def idle_write() -> None:
    """The same small write, hot and after idle gaps: on this machine a process
    that slept a few milliseconds does the same work several times slower."""
    from logstrand.logsdb import LogsDB, PutBatch
    from logstrand.types import compose_lsn

    with tempfile.TemporaryDirectory() as d:
        db = LogsDB.open(d, None)
        esn = 0
        for gap in (0.0, 0.0005, 0.002, 0.004):
            lat = []
            for _ in range(400):
                esn += 1
                pb = make_batch([compose_lsn(1, esn)], [b"x" * 100], timestamps_ms=1)
                if gap:
                    time.sleep(gap)
                t0 = time.perf_counter()
                db.write([PutBatch(1, pb, b"")], releases={1: compose_lsn(1, esn)})
                lat.append(time.perf_counter() - t0)
            print(
                f"LogsDB write of one 100 B record after {gap * 1e3:g} ms idle: "
                f"p50 {statistics.median(lat) * 1e6:.0f} us"
            )
        db.close()


def scopes() -> None:
    """A cancel scope entered and left, bare and with a deadline (µs each)."""

    async def run() -> None:
        n = 20_000
        t = time.perf_counter()
        for _ in range(n):
            with trio.CancelScope():  # noqa: ASYNC100 (its cost is the point)
                pass
        bare = (time.perf_counter() - t) / n * 1e6
        t = time.perf_counter()
        for _ in range(n):
            with trio.move_on_after(10):  # noqa: ASYNC100 (its cost is the point)
                pass
        timed = (time.perf_counter() - t) / n * 1e6
        print(f"cancel scope: {bare:.1f} us bare, {timed:.1f} us with a deadline")

    trio.run(run)


def offset_map() -> None:
    """A pass's first 200 keys in a new map of the whole budget and in one
    sized to them (ms of thread CPU)."""
    import numpy as np

    from logstrand.compaction import OffsetMap, hash_keys, map_bytes_for

    budget = 64 * 1024 * 1024
    OffsetMap(1024).put_many(hash_keys([b"warm"]), np.array([1]))  # numpy's first calls

    def first_keys(size: int, run: int) -> float:
        m = OffsetMap(size)
        h = hash_keys([b"group-%d-key-%d" % (i, run) for i in range(200)])
        t = time.thread_time()
        m.put_many(h, np.arange(1, 201))
        return (time.thread_time() - t) * 1000

    # Each run, not a median: the cost is the kernel's, and it varies from
    # one allocation to the next (the first is often the dearest).
    whole = [first_keys(budget, r) for r in range(5)]
    sized = [first_keys(map_bytes_for(200, budget), r) for r in range(5)]
    print("first 200 keys, ms of CPU, 5 new maps each:")
    print(f"  64 MiB (the whole budget): {', '.join(f'{x:.1f}' for x in whole)}")
    print(f"  sized to them:             {', '.join(f'{x:.2f}' for x in sized)}")


def wire() -> None:
    import cbor2
    import google_crc32c

    from logstrand.batch import make_batch
    from logstrand.wire import ReadRecords, encode_frame
    from logstrand.wire._codec import _values

    big = b"y" * 10240
    batches = tuple(
        make_batch(range(1 + 100 * i, 101 + 100 * i), [big] * 100, timestamps_ms=5)
        for i in range(4)
    )
    msg = ReadRecords(7, 1, 0, 401, 0, batches, (1, 100, 101, 200, 201, 300, 301, 400))
    values = _values(msg)
    mib = b"z" * (1 << 20)
    for name, fn in (
        ("encode_frame, 4 x 1 MiB", lambda: encode_frame(msg)),
        ("cbor2.dumps, the same", lambda: cbor2.dumps(values)),
        ("google_crc32c of 1 MiB", lambda: google_crc32c.value(mib)),
    ):
        runs = [timeit.timeit(fn, number=50) / 50 * 1000 for _ in range(5)]
        print(f"{name}: {statistics.median(runs):.2f} ms (median of 5 x 50)")


def main() -> None:
    if sys.argv[1:] == ["--wire"]:
        wire()
        return
    if sys.argv[1:] == ["--offset-map"]:
        offset_map()
        return
    if sys.argv[1:] == ["--packed"]:
        codec()
        return
    if sys.argv[1:] == ["--idle"]:
        idle_write()
        return
    if sys.argv[1:] == ["--scopes"]:
        scopes()
        return
    codec()
    with tempfile.TemporaryDirectory() as d, LocalCluster(d, nodes=1) as cluster:
        trio.run(ping, cluster)
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite://{d}/c.db"
        with open_epoch_store(url, create=True) as store:
            store.add_node(NodeConfig(1, f"127.0.0.1:{free_port()}", data_dir=f"{d}/n1"))
            store.create_logs(1, 1, LogAttributes(replication_factor=1))
        trio.run(in_process, url)
    idle_write()


if __name__ == "__main__":
    main()

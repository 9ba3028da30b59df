"""Floods against real nodes, all at once, while another client appends.

CBOR bombs before the handshake to every node, 300,000 STOREs whose replies
are never read, 5,000 idle or half-sent connections, and 100 read streams
that grant unbounded credit and never read.  The other client's appends must
keep a p99 under 1 s, and no node may grow by 200 MB or more.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import struct
import threading
import time
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.batch import make_batch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, rss_mb
from logstrand.wire import (
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    Hello,
    StartRead,
    Store,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

VICTIM_LOG = 1
FLOOD_LOG = 2


def _hello(cluster: LocalCluster) -> bytes:
    return encode_frame(Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster.cluster))


def _connect(cluster: LocalCluster, node_id: int) -> socket.socket:
    cfg = cluster.nodes[node_id]
    return socket.create_connection((cfg.host, cfg.port), timeout=10)


def _bombs(cluster: LocalCluster, stop: threading.Event) -> None:
    items = 32 * 1024 * 1024 - 16
    bomb = struct.pack(">I", items + 5) + b"\x9a" + struct.pack(">I", items) + b"\xa0" * items
    while not stop.is_set():
        for node_id in cluster.nodes:
            with contextlib.suppress(OSError), _connect(cluster, node_id) as s:
                s.sendall(bomb)
        time.sleep(0.5)


def _stores(cluster: LocalCluster, epoch: int, stop: threading.Event) -> None:
    # Valid STOREs (an epoch handed out, ESNs far above the tail) whose
    # replies are never read: the node answers each into a connection that
    # nobody drains.
    with contextlib.suppress(OSError), _connect(cluster, 1) as s:
        s.sendall(_hello(cluster))
        chunk = []
        for i in range(300_000):
            if stop.is_set():
                return
            lsn = (epoch << 32) | (1_000_000 + i)
            batch = make_batch([lsn], [b"f" * 100], timestamps_ms=1)
            chunk.append(encode_frame(Store.of(i + 1, FLOOD_LOG, 1, (1,), 0, False, batch)))
            if len(chunk) == 1000:
                s.sendall(b"".join(chunk))
                chunk = []


def _idle(cluster: LocalCluster, stop: threading.Event, sockets: list[socket.socket]) -> None:
    hello = _hello(cluster)
    for i in range(5000):
        if stop.is_set():
            return
        try:
            s = _connect(cluster, 2)
            sockets.append(s)  # closed by the test, even when the node hung up on it
            if i % 2:
                s.sendall(hello)  # a finished handshake, then silence
            else:
                s.sendall(hello[:3])  # half a frame
        except OSError:
            pass  # refused at the node's limit: that is the point


def _greedy_readers(cluster: LocalCluster, stop: threading.Event) -> None:
    with contextlib.suppress(OSError), _connect(cluster, 3) as s:
        s.sendall(_hello(cluster))
        for stream in range(100):
            start = StartRead(stream + 1, 1, FLOOD_LOG, 1, 2**64 - 1, 2**32 - 1, False, ())
            s.sendall(encode_frame(start))
        stop.wait(30)


@pytest.fixture(scope="module")
def flood_cluster(tmp_path_factory: pytest.TempPathFactory) -> LocalCluster:
    with LocalCluster(tmp_path_factory.mktemp("floods"), nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 2, LogAttributes(replication_factor=2))
        yield c


def test_floods_do_not_slow_other_clients(flood_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = flood_cluster
    pids = {n: cluster.procs[n].pid for n in cluster.nodes}
    with logstrand.connect(cluster.url) as client:
        # Records for the greedy readers to read, and the flood log's epoch.
        lsns = client.append_batch(FLOOD_LOG, [b"r" * 1000] * 20_000)
        client.append(VICTIM_LOG, b"warm up")
        rss0 = {n: rss_mb(p) for n, p in pids.items()}
        peak = dict(rss0)
        stop = threading.Event()
        sockets: list[socket.socket] = []
        floods: list[tuple[Callable[..., None], tuple[object, ...]]] = [
            (_bombs, (cluster, stop)),
            (_stores, (cluster, lsns[0] >> 32, stop)),
            (_idle, (cluster, stop, sockets)),
            (_greedy_readers, (cluster, stop)),
        ]
        threads = [threading.Thread(target=fn, args=args, daemon=True) for fn, args in floods]
        latencies = []
        try:
            for t in threads:
                t.start()
            t_end = time.monotonic() + 10
            while time.monotonic() < t_end:
                t0 = time.monotonic()
                client.append(VICTIM_LOG, b"victim")
                latencies.append(time.monotonic() - t0)
                for n, p in pids.items():
                    peak[n] = max(peak[n], rss_mb(p))
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
            for s in sockets:
                s.close()
        for n in cluster.nodes:
            assert cluster.alive(n), f"node {n} exited"
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99)]
        growth = {n: round(peak[n] - rss0[n]) for n in pids}
        print(
            f"victim appends: {len(latencies)}, p50 {statistics.median(latencies) * 1000:.1f} ms,"
            f" p99 {p99 * 1000:.1f} ms; RSS growth MB {growth}"
        )
        assert p99 < 1.0
        assert max(growth.values()) < 200
        # Still serving: a fresh client appends and reads back.
        lsn = client.append(VICTIM_LOG, b"after the floods")
        assert [r.payload for r in client.read(VICTIM_LOG, lsn, lsn)] == [b"after the floods"]


def test_idle_connections_are_closed_but_streams_and_nodes_stay(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, nodes=1, node_args=("--idle-timeout", "1")) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=1))
        cfg = cluster.nodes[1]

        def opened(node_id: int | None = None) -> socket.socket:
            s = socket.create_connection((cfg.host, cfg.port), timeout=10)
            hello = Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster.cluster, node_id)
            s.sendall(encode_frame(hello))
            assert s.recv(4096)  # HelloAck
            return s

        idle, reader, peer = opened(), opened(), opened(node_id=1)
        reader.sendall(encode_frame(StartRead(1, 1, 1, 1, 2**64 - 1, 100, False, ())))
        time.sleep(3.0)
        idle.settimeout(0.5)
        assert idle.recv(4096) == b""  # closed by the node
        for s in (reader, peer):
            s.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                assert s.recv(65536) != b""  # heartbeats, or nothing yet: still open
        for s in (idle, reader, peer):
            s.close()

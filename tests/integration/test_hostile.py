"""A hostile or careless peer with a plain socket, against real nodes without TLS.

Each attack below worked before the node checked messages at its dispatch
(issue 16): it crashed a node, erased or forged data, or blocked a log.  Each
test sends it to every node, then shows it refused, every node alive, appends
working, and every acknowledged record intact.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.batch import PackedBatch, make_batch
from logstrand.errors import Status
from logstrand.records import WRITTEN_BY_RECOVERY
from logstrand.testing import cpu_s, rss_mb
from logstrand.wire import (
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    CleanPoint,
    ErrorReply,
    GetDigest,
    Hello,
    HelloAck,
    LogInfo,
    LogInfoReply,
    Release,
    Seal,
    Store,
    StoreReply,
    Trim,
    TrimLog,
    decode_body,
    encode_frame,
)

if TYPE_CHECKING:
    from logstrand.testing import LocalCluster

LOG = 7  # R=2 (see conftest)
COMPACTED_LOG = 201


class Raw:
    """A plain-socket peer that speaks the protocol, with no client library."""

    def __init__(self, host: str, port: int, cluster: str, *, node_id: int | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buf = b""
        self.send(Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster, node_id))
        ack = self.recv()
        assert isinstance(ack, HelloAck)
        assert ack.status == Status.OK

    def send(self, msg: Any) -> None:
        self.sock.sendall(encode_frame(msg))

    def recv(self, timeout_s: float = 5.0) -> Any:
        self.sock.settimeout(timeout_s)
        while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack(">I", self.buf[:4])[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        (size,) = struct.unpack(">I", self.buf[:4])
        body, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
        return decode_body(body)

    def ask(self, msg: Any, reply_type: type, status: Status | None = None) -> Any:
        """Send ``msg``; its reply must be a ``reply_type`` (with ``status``)."""
        self.send(msg)
        reply = self.recv()
        assert isinstance(reply, reply_type), reply
        if status is not None:
            assert reply.status == status, reply
        return reply

    def close(self) -> None:
        self.sock.close()


def _raw(cluster: LocalCluster, node_id: int) -> Raw:
    cfg = cluster.nodes[node_id]
    return Raw(cfg.host, cfg.port, cluster.cluster)


def _refused(cluster: LocalCluster, node_id: int) -> float:
    cfg = cluster.nodes[node_id]
    url = f"http://127.0.0.1:{cfg.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("logstrand_messages_refused_total{")
    )


def _check_intact(cluster: LocalCluster, acked: dict[int, bytes], log: int = LOG) -> None:
    for node_id in cluster.nodes:
        assert cluster.alive(node_id), f"node {node_id} exited"
    with logstrand.connect(cluster.url) as client:
        more = client.append_batch(log, [b"after-1", b"after-2"])
        acked = {**acked, more[0]: b"after-1", more[1]: b"after-2"}
        got = {r.lsn: r.payload for r in client.read(log, min(acked), max(acked))}
    for lsn, payload in acked.items():
        assert got.get(lsn) == payload, f"record {lsn:#x} is {got.get(lsn)!r}, not {payload!r}"


@pytest.fixture
def acked(cluster: LocalCluster) -> dict[int, bytes]:
    payloads = [b"acked-%d" % i for i in range(20)]
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(LOG, payloads)
    return dict(zip(lsns, payloads, strict=True))


def test_messages_for_log_zero_leave_every_node_alive(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    bad = make_batch([(5 << 32) | 1], [b"x"], timestamps_ms=1)
    for node_id in cluster.nodes:
        raw = _raw(cluster, node_id)
        raw.send(Release(0, 5))
        raw.ask(Store.of(1, 0, 1, (node_id,), 0, True, bad, 5), StoreReply, Status.INVALID_PARAM)
        raw.close()
    time.sleep(1.5)  # the release persister runs every second: it must not choke
    _check_intact(cluster, acked)


def test_trim_to_one_node_above_the_recorded_trim_point_is_refused(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    for node_id in cluster.nodes:
        raw = _raw(cluster, node_id)
        reply = raw.ask(Trim(9, LOG, 2**64 - 1), ErrorReply, Status.INVALID_PARAM)
        assert "epoch store" in reply.message
        # A client's trim through a node cannot reach past the epochs handed out.
        raw.ask(TrimLog(10, LOG, 2**64 - 1), ErrorReply, Status.INVALID_PARAM)
        raw.close()
    _check_intact(cluster, acked)


def test_seal_and_digest_for_epochs_never_handed_out_are_refused(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    for node_id in cluster.nodes:
        raw = _raw(cluster, node_id)
        raw.ask(Seal(11, LOG, 2**32 - 1), ErrorReply, Status.INVALID_PARAM)
        raw.ask(GetDigest(12, LOG, 1, 1, 2**32 - 2), ErrorReply, Status.INVALID_PARAM)
        raw.close()
    _check_intact(cluster, acked)


def test_forged_recovery_store_cannot_replace_an_acknowledged_record(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    target = min(acked)
    epoch = target >> 32
    forged = make_batch([target], [b"forged"], timestamps_ms=1, flags=WRITTEN_BY_RECOVERY)
    for node_id in cluster.nodes:
        raw = _raw(cluster, node_id)
        # A seal far above anything handed out, and the log's own current
        # epoch (whose recovery finished long ago).
        for seal in (2**32 - 2, epoch + 1, epoch):
            store = Store.of(20 + seal % 7, LOG, seal, (node_id,), 0, True, forged, seal)
            reply = raw.ask(store, StoreReply)
            assert reply.status != Status.OK, f"recovery seal {seal} accepted"
        raw.close()
    _check_intact(cluster, acked)


def test_store_and_release_beyond_any_epoch_make_nothing_readable(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    lsn = ((2**32 - 1) << 32) | 1
    made_up = make_batch([lsn], [b"nobody appended this"], timestamps_ms=1)
    for node_id in cluster.nodes:
        raw = _raw(cluster, node_id)
        raw.ask(
            Store.of(30, LOG, 1, (node_id,), 0, True, made_up), StoreReply, Status.INVALID_PARAM
        )
        raw.send(Release(LOG, 2**64 - 1))
        raw.ask(LogInfo(31, LOG), LogInfoReply)  # the Release was handled before this
        raw.close()
    # No node holds the made-up record or takes it as released (a reader to
    # the tail would never reach it: look at what the nodes say instead).
    with logstrand.connect(cluster.url) as client:
        infos = client.log_info(LOG)
    assert len(infos) == len(cluster.nodes)
    for info in infos:
        assert info.last_lsn < lsn
        assert info.release_lsn < lsn
    _check_intact(cluster, acked)


def test_clean_point_for_a_plain_log_is_refused(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    before = _refused(cluster, 1)
    raw = _raw(cluster, 1)
    raw.send(CleanPoint(LOG, max(acked) + 1000))
    raw.send(CleanPoint(COMPACTED_LOG, 0))  # a compacted log: accepted (nothing to do)
    raw.close()
    deadline = time.monotonic() + 5
    while _refused(cluster, 1) < before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _refused(cluster, 1) == before + 1
    _check_intact(cluster, acked)


def _bomb(items: int) -> bytes:
    """A legal frame: one CBOR array of ``items`` empty maps (one byte each,
    a Python dict each once decoded)."""
    body = b"\x9a" + struct.pack(">I", items) + b"\xa0" * items
    return struct.pack(">I", len(body)) + body


def _closed_within(sock: socket.socket, timeout_s: float) -> float:
    sock.settimeout(timeout_s)
    t0 = time.monotonic()
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - t0


def test_cbor_bomb_before_and_after_hello_costs_the_node_nothing(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    # The largest frame a node takes after the handshake (32 MiB), full of
    # one-byte items: decoded, it would be 32 million dicts.
    bomb = _bomb(32 * 1024 * 1024 - 16)
    for node_id in cluster.nodes:
        cfg = cluster.nodes[node_id]
        pid = cluster.procs[node_id].pid
        cpu0, rss0 = cpu_s([pid]), rss_mb(pid)
        with socket.create_connection((cfg.host, cfg.port), timeout=5) as s:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.sendall(bomb)  # closed on the frame's header already
            assert _closed_within(s, 5.0) < 1.0
        raw = _raw(cluster, node_id)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            raw.sock.sendall(bomb)
        assert _closed_within(raw.sock, 5.0) < 1.0
        raw.close()
        cpu = cpu_s([pid]) - cpu0
        assert cpu < 1.0, f"node {node_id} spent {cpu:.2f} s of CPU on two frames"
        assert rss_mb(pid) - rss0 < 200
    with logstrand.connect(cluster.url) as client:
        t0 = time.monotonic()
        client.append(LOG, b"quick")
        assert time.monotonic() - t0 < 1.0
    _check_intact(cluster, acked)


def test_a_store_whose_body_changed_on_its_way_is_refused(
    cluster: LocalCluster, acked: dict[int, bytes]
) -> None:
    lsn = max(acked)
    target, other = sorted(cluster.nodes)[:2]
    cfg = cluster.nodes[target]
    raw = Raw(cfg.host, cfg.port, cluster.cluster, node_id=other)
    good = make_batch([lsn + 1000], [b"x" * 50], timestamps_ms=1, wave=1, copyset=(target, other))
    bad = bytearray(good.data)
    bad[-2] ^= 0x01  # a payload bit: the body no longer matches the client's checksum
    store = Store(1, LOG, 1, (target, other), 0, True, PackedBatch.parse(bytes(bad)))
    raw.ask(store, StoreReply, Status.CHECKSUM_MISMATCH)
    raw.close()
    _check_intact(cluster, acked)

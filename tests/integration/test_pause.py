"""A sequencer's node stops (SIGSTOP) and comes back (SIGCONT), with the
default settings, on ZooKeeper and on SQLite:

* appends to its logs succeed elsewhere within 5 s of the stop (the nodes'
  failure detector finds it dead long before its session runs out, and a
  client whose append hangs asks another node);
* an APPEND that waited in its socket while it was stopped is answered
  within a second of SIGCONT (REDIRECTED or PREEMPTED: it takes no logs back
  at once);
* it takes its logs back only after its hold-down, so no log changes
  sequencer more than twice while the test watches after SIGCONT.

``LOGSTRAND_PAUSE_HOLD_DOWN_S`` sets the nodes' ``--sequencer-hold-down``
(CI: 10 s; ``make faults``: 0, the default of 30 s),
``LOGSTRAND_PAUSE_WATCH_S`` how long the test watches after SIGCONT (CI:
20 s, past the hold-down; ``make faults``: 60), and
``LOGSTRAND_PAUSE_STORES`` the epoch stores it runs on (CI: SQLite, for
time; ``make faults``: both).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.batch import Codec, PackedBatch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import LogstrandError, Status
from logstrand.testing import LocalCluster, ZooKeeperServer, zookeeper_available
from logstrand.wire import (
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    Append,
    AppendReply,
    Hello,
    decode_body,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HOLD_DOWN_S = float(os.environ.get("LOGSTRAND_PAUSE_HOLD_DOWN_S", "10"))
WATCH_S = float(os.environ.get("LOGSTRAND_PAUSE_WATCH_S", "20"))
STORES = os.environ.get("LOGSTRAND_PAUSE_STORES", "sqlite").split(",")
#: How long each store's run keeps the node stopped (past its failure detection).
PAUSES = {"sqlite": 6.0, "zookeeper": 13.0}
LOGS = range(1, 13)


class Appender(threading.Thread):
    """Appends to the paused node's logs in turn, one at a time, and keeps
    (time, log, lsn or None) of each."""

    def __init__(self, client: logstrand.Client, logs: list[int]) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.logs = logs
        self.stop = threading.Event()
        self.results: list[tuple[float, int, int | None]] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            log = self.logs[i % len(self.logs)]
            i += 1
            try:
                lsn: int | None = self.client.append(log, b"p")
            except LogstrandError:
                lsn = None
            self.results.append((time.monotonic(), log, lsn))
            time.sleep(0.02)


def _raw_append(cluster: LocalCluster, node: int, log: int) -> socket.socket:
    cfg = cluster.nodes[node]
    s = socket.create_connection((cfg.host, cfg.port), timeout=10)
    s.sendall(encode_frame(Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster.cluster)))
    assert s.recv(4096)
    return s


def _reply(s: socket.socket, timeout_s: float) -> AppendReply:
    s.settimeout(timeout_s)
    head = s.recv(4)
    (size,) = struct.unpack(">I", head)
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    reply = decode_body(body)
    assert isinstance(reply, AppendReply)
    return reply


@pytest.fixture(scope="module")
def slow_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper with its default tick (2 s), so that sessions last what
    the nodes ask for (10 s), as in production; the shared fixture ticks
    every 200 ms, which caps sessions at 4 s."""
    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed")
    with ZooKeeperServer(tmp_path_factory.mktemp("zk2000"), tick_ms=2000) as server:
        yield server


@pytest.mark.parametrize(("kind", "pause_s"), [(k, PAUSES[k]) for k in STORES])
def test_a_stopped_sequencer_node_is_routed_around_and_does_not_flap(
    tmp_path: Path, kind: str, pause_s: float, request: pytest.FixtureRequest
) -> None:
    zk = request.getfixturevalue("slow_zookeeper").address if kind == "zookeeper" else None
    hold = ("--sequencer-hold-down", f"{HOLD_DOWN_S:g}") if HOLD_DOWN_S else ()
    with LocalCluster(
        tmp_path, nodes=3, zookeeper=zk, cluster=f"pause{kind}", node_args=hold
    ) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(LOGS.start, LOGS.stop - 1, LogAttributes(replication_factor=2))
        with logstrand.connect(cluster.url) as client:
            first = {log: client.append(log, b"warm up") for log in LOGS}
            mine = [log for log in LOGS if cluster.sequencer_of(log, first[log] >> 32) == 1]
            assert mine, "node 1 sequences none of the logs"
            # A raw connection to node 1, for an APPEND that waits while it is stopped.
            raw = _raw_append(cluster, 1, mine[0])
            appender = Appender(client, mine)
            appender.start()
            time.sleep(1.0)
            stopped = time.monotonic()
            cluster.pause_node(1)
            try:
                batch = PackedBatch.for_append([None], [b"queued"], Codec.NONE, None)
                raw.sendall(encode_frame(Append(7, mine[0], batch)))
                time.sleep(pause_s)
            finally:
                cluster.resume_node(1)
            resumed = time.monotonic()
            queued = _reply(raw, 5.0)
            answered_s = time.monotonic() - resumed
            raw.close()
            time.sleep(WATCH_S)
            appender.stop.set()
            appender.join(timeout=30)
        results = appender.results
        # The first append after the stop that a new sequencer took (a new epoch).
        moved = [
            t
            for t, log, lsn in results
            if t > stopped and lsn is not None and lsn >> 32 > first[log] >> 32
        ]
        back_s = moved[0] - stopped
        # Sequencer changes per log after SIGCONT: new epochs among its appends.
        changes = {}
        for log in mine:
            epochs = [lsn >> 32 for t, lg, lsn in results if lg == log and lsn and t > resumed]
            changes[log] = sum(1 for a, b in itertools.pairwise(epochs) if b != a)
        failed = sum(1 for t, _, lsn in results if lsn is None and t > stopped + 5)
        print(
            f"{kind}: appends back {back_s:.2f} s after SIGSTOP; the queued APPEND answered "
            f"{Status(queued.status).name} {answered_s:.2f} s after SIGCONT; sequencer "
            f"changes per log in {WATCH_S:g} s after SIGCONT: {changes}; failed appends "
            f"later than 5 s after the stop: {failed}"
        )
        assert back_s < 5.0
        assert answered_s < 1.0
        assert queued.status in (Status.REDIRECTED, Status.PREEMPTED, Status.OK)
        assert max(changes.values()) <= 2
        assert failed == 0

"""Rounds of many logs through a sequencer kill: one ``append_async`` to each
of many logs, again and again (each round leaves as ``AppendMany`` requests,
their batches' first attempts without a task of their own, their copies in
one group commit per request), while a node that runs a third of the logs'
sequencers is SIGKILLed.  Every acknowledged record is read back exactly once,
each log's records in the order they were appended, and no record is stored
twice (the idempotent numbering holds through the retrying path that takes
over the attempts the kill cut)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import logstrand
from logstrand import Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from concurrent.futures import Future
    from pathlib import Path

LOGS = 120


def test_rounds_of_many_logs_keep_order_and_numbering_through_a_sequencer_kill(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", nodes=4) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, LOGS, LogAttributes(replication_factor=2))
        settings = logstrand.ClientSettings(append_timeout_s=60.0)
        with logstrand.connect(c.url, settings=settings) as client:
            logs = range(1, LOGS + 1)
            for log in logs:
                client.append_async(log, b"warm")
            assert client.flush(60) == 0
            owners = {log: client.sequencer_node(log) for log in logs}
            victim = owners[1]
            moved = [log for log in logs if owners[log] == victim]
            assert len(moved) >= 10
            sent: list[tuple[int, bytes, Future[int]]] = []
            rounds = 0
            t0 = time.monotonic()
            killed_at = None
            while time.monotonic() - t0 < 4.5:
                for log in logs:
                    payload = b"%d-%d" % (log, rounds)
                    sent.append((log, payload, client.append_async(log, payload)))
                rounds += 1
                if killed_at is None and time.monotonic() - t0 > 1.5:
                    c.kill_node(victim)
                    killed_at = len(sent)
                time.sleep(0.05)  # a round at a time, not a flood
            assert client.flush(120) == 0
            assert killed_at is not None
            stored = {log: [r for r in client.read(log) if isinstance(r, Record)] for log in logs}
    acked: dict[int, list[tuple[int, bytes]]] = {log: [] for log in logs}
    failed = 0
    for log, payload, future in sent:
        if future.exception() is None:
            acked[log].append((future.result(), payload))
        else:
            failed += 1
    assert failed == 0, f"{failed} appends failed"
    assert rounds >= 10
    for log in logs:
        lsns = [lsn for lsn, _ in acked[log]]
        assert lsns == sorted(lsns), f"log {log}: records out of the order they were appended"
        payloads = [r.payload for r in stored[log]]
        assert len(payloads) == len(set(payloads)), f"log {log}: a record stored twice"
        assert [p for p in payloads if p != b"warm"] == [p for _, p in acked[log]]
        assert [r.lsn for r in stored[log] if r.payload != b"warm"] == lsns
    # The victim's logs moved to another sequencer, in a new epoch.
    for log in moved:
        assert lsn_epoch(acked[log][-1][0]) > lsn_epoch(acked[log][0][0])

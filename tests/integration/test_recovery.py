"""Sequencer failover with recovery, with real node processes."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import logstrand
from logstrand import Gap, GapType, Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path


def test_killing_the_sequencer_under_load_loses_no_acknowledged_record(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=4) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        acked: dict[int, bytes] = {}
        failed = 0
        stop = threading.Event()
        settings = logstrand.ClientSettings(append_timeout_s=20)

        def appender(client: logstrand.Client, name: str) -> None:
            nonlocal failed
            i = 0
            while not stop.is_set():
                payload = b"%s-%d" % (name.encode(), i)
                i += 1
                try:
                    acked[client.append(1, payload)] = payload
                except logstrand.LogstrandError:
                    failed += 1

        with logstrand.connect(c.url, settings=settings) as client:
            client.append(1, b"first")
            threads = [
                threading.Thread(target=appender, args=(client, f"w{k}"), daemon=True)
                for k in range(3)
            ]
            for t in threads:
                t.start()
            for _ in range(3):
                time.sleep(1.0)
                owner = c.sequencer_of(1, lsn_epoch(client.append(1, b"probe")))
                c.kill_node(owner)  # SIGKILL, possibly in the middle of a recovery
                time.sleep(1.5)
                c.start_node(owner)
            time.sleep(1.0)
            stop.set()
            for t in threads:
                t.join(timeout=60)
            assert len(acked) > 100
            assert len({lsn_epoch(x) for x in acked}) >= 3  # three failovers happened
            readers = [list(client.read(1, until=max(acked))) for _ in range(2)]
            # Recovery ran to the end: every epoch below the current one is clean.
            current = lsn_epoch(client.append(1, b"last"))
            with open_epoch_store(c.url) as store:
                deadline = time.monotonic() + 20
                while store.last_clean_epoch(1) < current - 1 and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert store.last_clean_epoch(1) == current - 1
    assert readers[0] == readers[1]  # one order for every reader
    items = readers[0]
    records = [x for x in items if isinstance(x, Record)]
    lsns = [r.lsn for r in records]
    assert lsns == sorted(set(lsns))  # in order, no duplicates
    got = {r.lsn: r.payload for r in records}
    for lsn, payload in acked.items():
        assert got.get(lsn) == payload, f"acknowledged {lsn} lost or changed"
    for gap in (x for x in items if isinstance(x, Gap)):
        assert gap.type in (GapType.HOLE, GapType.BRIDGE), gap
        assert not any(gap.lo <= lsn <= gap.hi for lsn in acked), gap

"""A node told to stop (SIGTERM) ends its sequencers' epochs itself, so that
the logs' next sequencers recover nothing, and comes back without a
hold-down; a node that is killed leaves its epochs to recovery, as before."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import logstrand
from logstrand import Gap, GapType, Record, lsn_epoch
from logstrand.epochstore import EpochEnd, LogAttributes, open_epoch_store
from logstrand.types import compose_lsn

if TYPE_CHECKING:
    from pathlib import Path

    from logstrand.testing import LocalCluster

LOGS = 40


def _cluster(tmp_path: Path) -> LocalCluster:
    from logstrand.testing import LocalCluster

    # The default hold-down (30 s): a node that comes back after a crash
    # takes no sequencers for that long, one that handed off takes them at once.
    return LocalCluster(tmp_path / "c", nodes=3)


def _node_log(c: LocalCluster, node_id: int) -> str:
    return (c.directory / "logs" / f"node{node_id}.log").read_text()


def _setup(c: LocalCluster, client: logstrand.Client) -> list[int]:
    """Three records in each log; the logs whose sequencer is on node 1."""
    with open_epoch_store(c.url) as store:
        store.create_logs(1, LOGS, LogAttributes(replication_factor=2))
    for log in range(1, LOGS + 1):
        for i in range(3):
            client.append(log, b"%d" % i)
    mine = [log for log in range(1, LOGS + 1) if client.sequencer_node(log) == 1]
    assert len(mine) >= 4
    return mine


def _wait(what: str, done: object, timeout_s: float) -> float:
    t0 = time.monotonic()
    while not done():  # type: ignore[operator]
        assert time.monotonic() - t0 < timeout_s, f"{what} within {timeout_s} s"
        time.sleep(0.1)
    return time.monotonic() - t0


def test_a_node_told_to_stop_ends_its_epochs_and_comes_back_at_once(tmp_path: Path) -> None:
    with _cluster(tmp_path) as c, logstrand.connect(c.url) as client:
        mine = _setup(c, client)
        c.stop_node(1)
        assert f"ended {len(mine)} of {len(mine)} sequencers' epochs" in _node_log(c, 1)
        with open_epoch_store(c.url) as store:
            for log in mine:
                # What recovery would have decided: three records, a bridge after.
                assert store.last_clean_epoch(log) == 1
                assert store.epoch_end(log, 1) == EpochEnd(3, 4, 1)
                assert store.offset_bases(log)[-1] == (2, 3)
        c.start_node(1)
        # No hold-down: the logs go back to node 1 as soon as it is up.
        _wait("node 1 owns its logs again", lambda: client.sequencer_node(mine[0]) == 1, 10.0)
        for log in mine:
            lsn = client.append(log, b"after")
            assert lsn == compose_lsn(2, 1)
        # Nobody recovered epoch 1 of these logs: there was nothing to recover.
        logs = "".join(_node_log(c, n) for n in (1, 2, 3))
        assert not any(f"log {log} epoch 1 recovered" in logs for log in mine)
        for log in mine:
            items = list(client.read(log, until=compose_lsn(2, 1)))
            payloads = [i.payload for i in items if isinstance(i, Record)]
            assert payloads == [b"0", b"1", b"2", b"after"]
            gaps = [i for i in items if isinstance(i, Gap)]
            assert [(g.type, g.lo) for g in gaps] == [(GapType.BRIDGE, compose_lsn(1, 4))]


def test_a_node_that_is_killed_leaves_its_epochs_to_recovery(tmp_path: Path) -> None:
    with _cluster(tmp_path) as c, logstrand.connect(c.url) as client:
        mine = _setup(c, client)
        c.kill_node(1)
        with open_epoch_store(c.url) as store:
            assert [store.last_clean_epoch(log) for log in mine] == [0] * len(mine)
        for log in mine:  # their next sequencers, on nodes 2 and 3, recover epoch 1
            assert lsn_epoch(client.append(log, b"after")) == 2
        logs = "".join(_node_log(c, n) for n in (2, 3))
        assert all(f"log {log} epoch 1 recovered" in logs for log in mine)
        c.start_node(1)
        assert "no hold-down" not in _node_log(c, 1)


def test_a_second_sigterm_while_a_node_exits_does_not_kill_it(tmp_path: Path) -> None:
    """``LocalCluster`` signals every node, then each again as it waits for
    it (a supervisor's second SIGTERM): a node that had shut down by then
    died of it (-15) before its atexit work ran (its last log lines, a
    trace's marks: ``bench/single.py --trace`` lost two nodes' stages).
    Every node now exits 0."""
    with _cluster(tmp_path) as c:
        with logstrand.connect(c.url) as client:
            _setup(c, client)
        procs = dict(c.procs)
    assert {n: p.returncode for n, p in procs.items()} == {1: 0, 2: 0, 3: 0}

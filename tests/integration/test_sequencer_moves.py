"""A membership change moves a third of many logs' sequencers while appends
go on, and moves them back: every record appended is acknowledged once,
stored once and read back in the order its thread appended it."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import logstrand
from logstrand import Record, lsn_epoch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

LOGS = 150


def _wait(what: str, done: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.2)


def test_a_third_of_the_sequencers_move_away_and_back_while_appends_go_on(
    tmp_path: Path,
) -> None:
    logs = range(1, LOGS + 1)
    args = ("--sequencer-hold-down", "1")
    with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, LOGS, LogAttributes(replication_factor=2))
        settings = logstrand.ClientSettings(append_timeout_s=60.0)
        with logstrand.connect(c.url, settings=settings) as client:
            # The client learns the membership from the epoch store's watch:
            # on a busy machine its first view may not have node 3 yet (CI
            # once got no log of node 3's here), so wait until it has.
            _wait(
                "the client's view of all three nodes",
                lambda: {client.sequencer_node(log) for log in logs} == {1, 2, 3},
            )
            owners = {log: client.sequencer_node(log) for log in logs}
            moved = [log for log in logs if owners[log] == 3]
            assert LOGS // 5 < len(moved) < LOGS // 2
            acked: dict[int, list[int]] = {log: [] for log in logs}
            errors: list[BaseException] = []
            stop = threading.Event()
            rounds = [0]

            def writer() -> None:
                i = 0
                while not stop.is_set():
                    sent = [(log, client.append_async(log, b"%d" % i)) for log in logs]
                    for log, future in sent:
                        try:
                            future.result(120)
                            acked[log].append(i)
                        except Exception as exc:
                            errors.append(exc)
                    i += 1
                    rounds[0] = i

            thread = threading.Thread(target=writer)
            thread.start()
            try:
                _wait("a first round", lambda: rounds[0] >= 2)
                c.stop_node(3)  # it leaves the membership: its logs move to 1 and 2
                seen = rounds[0]
                _wait("rounds without node 3", lambda: rounds[0] >= seen + 2)
                c.start_node(3)  # back after its hold-down: the logs move back
                _wait(
                    "the logs' owner back on node 3",
                    lambda: all(client.sequencer_node(log) == 3 for log in moved),
                )
                seen = rounds[0]
                _wait("rounds with node 3 back", lambda: rounds[0] >= seen + 2)
            finally:
                stop.set()
                thread.join(180)
            assert errors == []
            tails = client.tail_lsns(logs)
            for log in logs:
                got = [
                    int(r.payload)
                    for r in client.read(log, 1, tails[log])
                    if isinstance(r, Record) and r.payload is not None
                ]
                assert got == acked[log], f"log {log}"
            # Each moved log went to another node and back: two new epochs at
            # least.  Under .ci/run's load one log once took a third (every
            # record still read back once, in order, above); not explained yet.
            assert min(lsn_epoch(tails[log]) for log in moved) >= 3
            assert {lsn_epoch(tails[log]) for log in logs if log not in moved} == {1}

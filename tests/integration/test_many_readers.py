"""One client reads many logs at once (``read_many``): over one connection
per node, with no task and no timer per log, idle streams silent on the
nodes, and a clear error past a node's bound on streams per connection."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
import trio

import logstrand
from logstrand import LSN_OLDEST, Record
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import LogstrandError, Status
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

LOGS = 600


def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_one_client_follows_600_logs_and_leaves_early(tmp_path: Path) -> None:
    """600 logs followed from one client: every record appended after the
    reader opened arrives once, in order per log; while nothing is appended
    the nodes send nothing; leaving the loop early and closing stops every
    stream on every node.  (The code before: the 257th stream on a
    connection was refused and those logs' readers waited forever.)"""
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, LOGS, LogAttributes(replication_factor=2))
        logs = range(1, LOGS + 1)
        settings = logstrand.ClientSettings(append_timeout_s=60.0)
        with (
            logstrand.connect(c.url, settings=settings) as writer,
            logstrand.connect(c.url) as client,
        ):
            pairs = client.read_many(dict.fromkeys(logs, LSN_OLDEST), None)
            got: dict[int, list[bytes]] = {log: [] for log in logs}
            futures = [writer.append_async(log, b"one %d" % log) for log in logs]
            futures += [writer.append_async(log, b"two %d" % log) for log in logs]
            assert writer.flush(120) == 0
            for _ in range(2 * LOGS):
                log, item = next(pairs)
                assert isinstance(item, Record), item
                got[log].append(item.payload)
            assert got == {log: [b"one %d" % log, b"two %d" % log] for log in logs}
            streams = {n: c.metric(n, "logstrand_read_streams") for n in c.nodes}
            assert sum(streams.values()) >= 2 * LOGS  # each log's nodeset: 2 or 3 nodes
            assert max(streams.values()) > 256  # the old bound on one connection
            # Idle: the nodes send these logs' readers nothing at all.
            sent = [c.metric(n, "logstrand_read_messages_total") for n in c.nodes]
            time.sleep(2.5)
            assert [c.metric(n, "logstrand_read_messages_total") for n in c.nodes] == sent
            # One more record to a log: it arrives; then leave and close.
            writer.append(7, b"three")
            log, item = next(pairs)
            assert (log, item.payload) == (7, b"three")  # type: ignore[union-attr]
            pairs.close()
            _until(lambda: all(c.metric(n, "logstrand_read_streams") == 0 for n in c.nodes))


def test_a_node_that_takes_no_more_streams_is_an_error_not_a_wait(tmp_path: Path) -> None:
    """Past a node's ``--read-streams-per-connection`` the read raises
    OVERLOADED naming the option (the code before: those logs' readers
    waited forever, retrying every second)."""
    args = ("--read-streams-per-connection", "50")
    with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 80, LogAttributes(replication_factor=2))

        async def main() -> None:
            async with logstrand.open_client(c.url) as client:
                with trio.fail_after(30):
                    async with client.read_many(dict.fromkeys(range(1, 81), 1), None) as r:
                        with pytest.raises(LogstrandError) as err:
                            async for _pair in r:
                                pass
            assert err.value.status == Status.OVERLOADED
            assert "--read-streams-per-connection" in str(err.value)

        trio.run(main)

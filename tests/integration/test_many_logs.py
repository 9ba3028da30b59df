"""Many logs: a burst of first appends right after the logs are created
(every one activates a sequencer) ends with no error, and idle logs cost a
node's ticks nothing (``bench/scale.py`` measures the rest)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, cpu_s

if TYPE_CHECKING:
    from pathlib import Path

LOGS = 2000


def test_a_burst_of_first_appends_to_new_logs_ends_without_error(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, LOGS, LogAttributes(replication_factor=2))
        errors: list[BaseException] = []
        # Alone on this machine the default 10 s per append is enough (6 s for
        # all; the code before: 1,674 of 2,000 timed out); beside another test
        # module in CI the burst took 12.8 s, so the last ones get more time.
        settings = logstrand.ClientSettings(append_timeout_s=60.0)
        with logstrand.connect(c.url, settings=settings) as client:
            t0 = time.monotonic()
            futures = [client.append_async(log, b"first") for log in range(1, LOGS + 1)]
            assert client.flush(120) == 0
            took = time.monotonic() - t0
            for f in futures:
                if f.exception() is not None:
                    errors.append(f.exception())  # type: ignore[arg-type]
            lsns = {f.result() for f in futures if f.exception() is None}
            print(f"{LOGS} first appends in {took:.1f} s ({LOGS / took:.0f} activations/s)")
            assert errors == []
            assert len(lsns) == 1  # each the first record of its log's first epoch
            # One more to each, all at once: at most a window of them out to
            # each node, the rest waiting in the client, none timing out.
            t0 = time.monotonic()
            again = [client.append_async(log, b"again") for log in range(1, LOGS + 1)]
            assert client.flush(120) == 0
            print(f"one more to each: {LOGS / (time.monotonic() - t0):.0f} rec/s")
            assert [f.exception() for f in again] == [None] * LOGS
            assert {f.result() for f in again} == {min(lsns) + 1}
            pids = [p.pid for p in c.procs.values()]
            c0 = cpu_s(pids)
            time.sleep(3.0)
            idle = (cpu_s(pids) - c0) / 3.0 / len(pids)
            print(f"idle with {LOGS} active logs: {idle:.1%} of a core per node")
            assert idle < 0.10

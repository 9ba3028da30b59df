"""Kill a writing process with SIGKILL; every write acknowledged with sync=True survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from logstrand.logsdb import LogsDB, LogsDBOptions

if TYPE_CHECKING:
    from pathlib import Path

WRITER = textwrap.dedent(
    """
    import sys, time
    from logstrand.logsdb import LogsDB, LogsDBOptions, PutBatch
    from logstrand.batch import make_batch
    # Small partitions, so that the kill may also land in a partition rollover.
    db = LogsDB.open(sys.argv[1], LogsDBOptions(partition_bytes_max=200_000))
    lsn = 1
    while True:
        for log in (1, 2):
            n = 50
            lsns = range(lsn, lsn + n)
            payloads = [b"r%d" % i for i in lsns]
            batch = make_batch(lsns, payloads, timestamps_ms=int(time.time() * 1000))
            db.write([PutBatch.of(log, batch, (1, 2))], sync=(log == 1))
        # Log 1 was written with sync=True: acknowledge it.
        print(lsn + n - 1, flush=True)
        lsn += n
    """
)


@pytest.mark.parametrize("acks_before_kill", [1, 40, 400])
def test_sigkill_keeps_synced_writes(tmp_path: Path, acks_before_kill: int) -> None:
    path = tmp_path / "db"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = 0
    try:
        assert proc.stdout is not None
        for _ in range(acks_before_kill):
            line = proc.stdout.readline()
            assert line, "writer died early"
            acked = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    with LogsDB.open(path, LogsDBOptions(partition_bytes_max=200_000)) as db:
        got = [r.lsn for r in db.iter_records(1)]
        # Every acknowledged record is there, in order, with nothing out of place;
        # writes after the last ack may or may not have made it.
        assert got[:acked] == list(range(1, acked + 1))
        assert got == list(range(1, len(got) + 1))
        assert all(r.payload == b"r%d" % r.lsn for r in db.iter_records(1))
        # The directory agrees with the data it describes.
        assert sum(e.records for _, e in db.directory(1)) == len(got)
        other = [r.lsn for r in db.iter_records(2)]
        assert other == list(range(1, len(other) + 1))
        assert sum(e.records for _, e in db.directory(2)) == len(other)

"""LogsDB's partitions on RocksDB as seed 003 has them: written in time order
and left as written (no compaction merging files inside a partition), a
partition rolling on its SST file count, reads right from a partition of
hundreds of files, and the bytes written by kind (write amplification)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from logstrand.logsdb import LogsDB, LogsDBOptions
from logstrand.testing import memory_logsdb

from .logsdb_helpers import put

if TYPE_CHECKING:
    from pathlib import Path

T0 = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def test_a_partition_rolls_on_its_file_count(tmp_path: Path) -> None:
    """Each flush leaves one more SST file in the partition (nothing merges
    them); past ``partition_files_max`` the next write starts a partition.
    With RocksDB's level compaction, level 0 never held more than 4 files
    and this roll never came."""
    clock = Clock()
    with LogsDB.open(tmp_path, LogsDBOptions(partition_files_max=5), clock_ms=clock) as db:
        for i in range(8):
            clock.now += 1_001  # the file count is read at most once a second
            db.write([put(1, range(10 * i + 1, 10 * i + 11), ts=clock.now)], sync=False)
            db.flush()
            if len(db.partitions()) > 1:
                break
        assert len(db.partitions()) == 2, db.sst_files()
        assert db.sst_files() >= 6
        assert [r.lsn for r in db.read(1)] == list(range(1, 10 * i + 11))


def test_a_partition_of_hundreds_of_files_reads_back(tmp_path: Path) -> None:
    """300 flushes of three logs' interleaved batches: one partition of 300
    files, and every log reads back whole and in order, from any LSN."""
    opts = LogsDBOptions(partition_files_max=10_000)
    payload = os.urandom(100)
    with LogsDB.open(tmp_path, opts) as db:
        for i in range(300):
            log = 1 + i % 3
            first = 10 * (i // 3) + 1
            db.write([put(log, range(first, first + 10), ts=T0 + i, payload=payload)], sync=False)
            db.flush()
        assert len(db.partitions()) == 1
        assert db.sst_files() >= 300
        for log in (1, 2, 3):
            records = db.read(log)
            assert [r.lsn for r in records] == list(range(1, 1001))
            assert {r.payload for r in records} == {payload}
            assert [r.lsn for r in db.read(log, 555, 560)] == list(range(555, 561))
        assert db.find_time(2, T0 + 151) == 501  # write 151, log 2's 51st: LSNs 501-510
        assert db.io_bytes().compaction == 0


def test_bytes_written_by_kind_give_the_write_amplification(tmp_path: Path) -> None:
    payload = os.urandom(1000)
    with LogsDB.open(tmp_path) as db:
        for i in range(20):
            db.write([put(1, range(100 * i + 1, 100 * i + 101), ts=T0, payload=payload)])
        db.flush()
        io = db.io_bytes()
    assert io.user > 20 * 100 * 1000
    assert io.wal >= io.user
    assert io.compaction == 0
    # Every byte flushed once (random payloads: compression saves nothing).
    assert 0.9 < io.amplification < 1.2
    mem = memory_logsdb()
    mem.write([put(1, [1], ts=T0)])
    assert mem.io_bytes().user > 0
    assert mem.io_bytes().amplification == 0.0


def test_an_old_partition_of_many_small_files_is_merged_once(tmp_path: Path) -> None:
    """Late records (or rebuilding) leave tiny files in a partition no longer
    written to: past ``merge_files_min`` of them it is merged into one sorted
    run, once, and reads the same.  The newest partition, and a partition of
    files that are not small, never are."""
    clock = Clock()
    opts = LogsDBOptions(partition_duration_ms=60_000, merge_files_min=20)
    with LogsDB.open(tmp_path, opts, clock_ms=clock) as db:
        for i in range(40):  # two logs in each file: every file spans both
            lsns = range(10 * i + 1, 10 * i + 11)
            db.write([put(1, lsns, ts=clock.now), put(2, lsns, ts=clock.now)], sync=False)
            db.flush()
        assert db.small_file_partitions() == []  # the newest: still written to
        clock.now += 60_001
        db.write([put(3, [1], ts=clock.now)], sync=False)  # a new partition starts
        assert len(db.small_file_partitions()) == 1
    # The same 40 files are not small when "small" is under 1 byte.
    large = LogsDBOptions(partition_duration_ms=60_000, merge_files_min=20, merge_file_bytes=1)
    with LogsDB.open(tmp_path, large, clock_ms=clock) as db:
        assert db.small_file_partitions() == []
    with LogsDB.open(tmp_path, opts, clock_ms=clock) as db:
        old = db.small_file_partitions()
        assert len(old) == 1
        assert db.sst_files() >= 40
        db.merge_partitions(old)
        assert db.sst_files() <= 3  # rewritten into one sorted run
        assert db.small_file_partitions() == []
        for log in (1, 2):
            assert [r.lsn for r in db.read(log, max_records=1000)] == list(range(1, 401))

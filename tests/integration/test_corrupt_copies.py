"""A byte flipped in a node's RocksDB files: the node reports the copies it
cannot read, the reader asks another holder at once, and where no holder has a
good copy it delivers one CHECKSUM_FAIL gap over exactly those records."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import trio

from logstrand import Gap, Record
from logstrand.client import connect, open_client
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.logsdb import LogsDB
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

BATCHES, PER_BATCH = 5, 100


def marker(log: int, i: int) -> bytes:
    return b"MARK%d-%d:" % (log, i)


def db_dirs(node_dir: Path) -> list[Path]:
    """The RocksDB directories under a node's data directory."""
    return [p.parent for p in node_dir.rglob("CURRENT")]


def flip_in_sst(node_dir: Path, mark: bytes) -> bool:
    """Flip a bit of ``mark``'s first payload in an SST file of the node; True if found."""
    for d in db_dirs(node_dir):
        for sst in d.glob("*.sst"):
            data = bytearray(sst.read_bytes())
            at = data.find(mark)
            if at >= 0:
                data[at + len(mark) + 5] ^= 0x10
                sst.write_bytes(bytes(data))
                return True
    return False


async def read_all(url: str, log: int, tail: int) -> tuple[list[int], list[Gap], float]:
    lsns: list[int] = []
    gaps: list[Gap] = []
    t0 = time.perf_counter()
    async with open_client(url) as client:
        with trio.fail_after(30):
            async with client.read(log, 0, tail) as reader:
                async for item in reader:
                    if isinstance(item, Record):
                        lsns.append(item.lsn)
                    else:
                        gaps.append(item)
    return lsns, gaps, time.perf_counter() - t0


def test_corrupt_copies_on_disk_r1_and_r2(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, nodes=3) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=1))
            store.create_logs(2, 2, LogAttributes(replication_factor=2))
        firsts: dict[tuple[int, int], list[int]] = {}
        with connect(cluster.url) as client:
            for log in (1, 2):
                for i in range(BATCHES):
                    payloads = [marker(log, i) + os.urandom(200) for _ in range(PER_BATCH)]
                    firsts[log, i] = client.append_batch(log, payloads)
            tails = {log: client.tail_lsn(log) for log in (1, 2)}
        for n in list(cluster.procs):
            cluster.stop_node(n)
        for n in cluster.nodes:  # what a node wrote to its WAL, into SST files
            for d in db_dirs(tmp_path / f"node{n}"):
                with LogsDB.open(d) as db:
                    db.flush()
        # R=1: the only copy of batch 2 of log 1.  R=2: one of the two
        # copies of batch 2 of log 2.
        holder = [n for n in cluster.nodes if flip_in_sst(tmp_path / f"node{n}", marker(1, 2))]
        assert len(holder) == 1
        flipped = next(n for n in cluster.nodes if flip_in_sst(tmp_path / f"node{n}", marker(2, 2)))
        for n in cluster.nodes:
            cluster.start_node(n)

        lsns, gaps, took = trio.run(read_all, cluster.url, 1, tails[1])
        bad = firsts[1, 2]
        assert [(g.type.name, g.lo, g.hi) for g in gaps] == [("CHECKSUM_FAIL", bad[0], bad[-1])]
        want = [x for i in range(BATCHES) if i != 2 for x in firsts[1, i]]
        assert lsns == want  # the records before the bad ones too, in order
        assert took < 1.8, f"the reader waited {took:.2f} s: a stall timer (2 s) fired"

        lsns, gaps, took = trio.run(read_all, cluster.url, 2, tails[2])
        assert gaps == []
        assert lsns == [x for i in range(BATCHES) for x in firsts[2, i]]
        assert took < 1.8, f"the reader waited {took:.2f} s: a stall timer (2 s) fired"

        with connect(cluster.url) as client:
            seen = {n: client.node_status(n).corrupt_copies for n in cluster.nodes}  # type: ignore[union-attr]
        assert seen[holder[0]] >= 1
        assert seen[flipped] >= 1
        log_text = (tmp_path / "logs" / f"node{holder[0]}.log").read_text()
        assert "copies cannot be read" in log_text

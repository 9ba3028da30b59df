"""A full disk never kills a node: one node's data directory on a small tmpfs.

Below its floor (--min-free) the node refuses STOREs with NOSPC, the sequencer
stores elsewhere, the node serves reads and says so in `logstrand status`; with
space back it takes STOREs again.  With no floor, the write that finds the disk
full breaks RocksDB (it refuses every later write): the node answers NOSPC,
stays up, and reopens its LogsDB once space is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from logstrand import Record
from logstrand.client import connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

MiB = 1024 * 1024
FULL = 3  # the node whose data directory is on the tmpfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    path.mkdir(parents=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)]
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # root, but in a container that may not mount
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave: int) -> Path:
    """A ballast file that leaves about ``leave`` bytes free."""
    ballast = path / "ballast"
    with open(ballast, "wb") as f, contextlib.suppress(OSError):
        f.write(b"\0" * max(0, free_bytes(path) - leave))
    return ballast


def wait_for(what: str, cond: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def copies_on(client: object, node: int, log: int) -> int:
    """Records of ``log`` that ``node`` holds."""
    segments = client.log_directory(log)  # type: ignore[attr-defined]
    return sum(s.records for s in segments if s.node_id == node)


def status(cluster: LocalCluster) -> dict[int, dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "logstrand", "status", "--url", cluster.url, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {r["node_id"]: r for r in json.loads(out.stdout)["nodes"]}


def append_many(client: object, log: int, batches: int) -> list[int]:
    return [
        lsn
        for i in range(batches)
        for lsn in client.append_batch(log, [b"%d" % i * 100] * 20)  # type: ignore[attr-defined]
    ]


def test_a_full_disk_never_kills_a_node(tmp_path: Path) -> None:
    with (
        tmpfs(tmp_path / f"node{FULL}", 160) as disk,
        LocalCluster(tmp_path, nodes=3, node_args=("--min-free", "48MiB")) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        node = cluster.procs[FULL]
        with connect(cluster.url) as client:
            lsns = append_many(client, 1, 30)
            before = copies_on(client, FULL, 1)
            assert before > 0

            # Below the floor: STOREs refused, appends go on elsewhere.
            ballast = fill(disk, 24 * MiB)
            wait_for("no space", lambda: status(cluster)[FULL]["state"] == "no space")
            lsns += append_many(client, 1, 30)
            assert copies_on(client, FULL, 1) == before
            time.sleep(5)  # the node used to exit about 4 s after a failed write
            assert node.poll() is None
            records = [
                r.lsn for r in client.read(1, 0, client.tail_lsn(1)) if isinstance(r, Record)
            ]
            assert records == lsns
            assert status(cluster)[FULL]["free_bytes"] < 48 * MiB

            # Space back: STOREs again.
            ballast.unlink()
            wait_for("alive", lambda: status(cluster)[FULL]["state"] == "alive")
            lsns += append_many(client, 1, 30)
            assert copies_on(client, FULL, 1) > before

        # No floor: the write itself meets the full disk.
        cluster.stop_node(FULL)
        cluster.node_args = ("--min-free", "0")
        cluster.start_node(FULL)
        node = cluster.procs[FULL]
        with connect(cluster.url) as client:
            ballast = fill(disk, 0)
            lsns += append_many(client, 1, 60)  # every append succeeds
            wait_for("no space", lambda: status(cluster)[FULL]["state"] == "no space")
            time.sleep(5)
            assert node.poll() is None
            held = copies_on(client, FULL, 1)
            ballast.unlink()
            wait_for("alive", lambda: status(cluster)[FULL]["state"] == "alive")
            lsns += append_many(client, 1, 30)
            assert copies_on(client, FULL, 1) > held
            records = [
                r.lsn for r in client.read(1, 0, client.tail_lsn(1)) if isinstance(r, Record)
            ]
            assert records == lsns
        log_text = (tmp_path / "logs" / f"node{FULL}.log").read_text()
        assert "STOREs are refused" in log_text
        assert "LogsDB reopened" in log_text

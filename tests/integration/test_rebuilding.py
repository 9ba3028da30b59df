"""Rebuilding on real node processes (named after LogDevice's RebuildingTest
where they match): a lost node's copies come back to R, drains, aborts,
wiped nodes, the grace period, and donors that restart."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import trio

from logstrand import Gap, Record
from logstrand.admin import rebuilding_doc
from logstrand.client import connect, open_client
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.logsdb import LogsDB
from logstrand.records import HOLE
from logstrand.testing import LocalCluster

from .test_operations import cli, ok

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LOGS = (1, 2, 3)
Appended = dict[int, set[bytes]]
LOSS = ("DATALOSS", "CHECKSUM_FAIL")


@contextlib.contextmanager
def cluster4(tmp_path: Path, **kw: Any) -> Iterator[LocalCluster]:
    """Four nodes; logs 1..3 with R=2 over all of them."""
    # No appends run while these tests start a rebuilding: donors need not
    # wait for sequencers to stop placing copies on the set (5 s by default).
    kw["node_args"] = ("--rebuild-settle", "0.5", *kw.get("node_args", ()))
    with LocalCluster(tmp_path / "c", nodes=4, **kw) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 3, LogAttributes(replication_factor=2))
        yield c


def fill(url: str, batches: int = 10, per_batch: int = 100, size: int = 100) -> Appended:
    """Append unique payloads to every log; what each log should hold."""
    appended: dict[int, set[bytes]] = {log: set() for log in LOGS}
    with connect(url) as client:
        for log in LOGS:
            for _ in range(batches):
                payloads = [os.urandom(size) for _ in range(per_batch)]
                client.append_batch(log, payloads)
                appended[log].update(payloads)
    return appended


async def _read(url: str, log: int, tail: int, limit_s: float) -> tuple[list[Record], list[Gap]]:
    records: list[Record] = []
    gaps: list[Gap] = []
    async with open_client(url) as client:
        with trio.fail_after(limit_s):
            async with client.read(log, 0, tail) as reader:
                async for item in reader:
                    if isinstance(item, Record):
                        records.append(item)
                    else:
                        gaps.append(item)
    return records, gaps


def check_all_read(url: str, appended: Appended, limit_s: float = 30) -> int:
    """Every appended payload is read, each LSN and each payload once (appends
    are idempotent), and no gap says data was lost.  Returns how many records
    were read."""
    read = 0
    with connect(url) as client:
        tails = {log: client.tail_lsn(log) for log in LOGS}
    for log in LOGS:
        records, gaps = trio.run(_read, url, log, tails[log], limit_s)
        lost = [g for g in gaps if g.type.name in LOSS]
        assert not lost, (log, lost[:3])
        assert len({r.lsn for r in records}) == len(records), "an LSN was delivered twice"
        got = Counter(r.payload for r in records)
        assert set(got) >= appended[log], (log, len(appended[log] - set(got)))
        assert max(got.values()) == 1, "a record is in the log twice"
        read += len(records)
    return read


def copies(c: LocalCluster, nodes: list[int]) -> dict[tuple[int, int], int]:
    """Copies of each (log, LSN) on the data directories of ``nodes`` (stopped)."""
    count: Counter[tuple[int, int]] = Counter()
    for n in nodes:
        with LogsDB.open(c.nodes[n].data_dir) as db:
            for log in LOGS:
                for rec in db.iter_records(log):
                    if not rec.flags & HOLE:
                        count[log, rec.lsn] += 1
    return count


def state(url: str) -> dict[str, Any]:
    """``status --json``'s rebuilding fields, read as it reads them."""
    with open_epoch_store(url) as store:
        return rebuilding_doc(store, store.alive_nodes())


def storage_state(url: str, node: int) -> str:
    return str(state(url)["storage_state"][node])


def wait_for(fn: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fn():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_rebuild_a_lost_node_then_lose_another(tmp_path: Path) -> None:
    """RebuildingTest.Simple: a node is killed and its directory deleted;
    ``logstrand rebuild`` re-creates exactly the copies it held; then another
    node is killed and every record is still read, with no DATALOSS."""
    with cluster4(tmp_path) as c:
        appended = fill(c.url)
        c.stop_node(4)
        held = len(copies(c, [4]))  # what node 4 held: to be re-created once each
        c.wipe_node(4)
        done = cli(c.url, "rebuild", "4", "--wait", "--json")
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["storage_state"] == "AUTHORITATIVE_EMPTY"
        assert out["last"]["records"] == held
        assert out["last"]["authoritative"]
        doc = json.loads(cli(c.url, "status", "--json").stdout)
        assert doc["storage_state"] == {
            "1": "FULLY_AUTHORITATIVE",
            "2": "FULLY_AUTHORITATIVE",
            "3": "FULLY_AUTHORITATIVE",
            "4": "AUTHORITATIVE_EMPTY",
        }
        c.kill_node(3)
        check_all_read(c.url, appended)
        for n in (1, 2):
            c.stop_node(n)
        # R copies of every record on the nodes that are not rebuilt away.
        count = copies(c, [1, 2, 3])
        assert len(count) == sum(len(p) for p in appended.values())
        assert set(count.values()) == {2}


def test_drain_then_remove(tmp_path: Path) -> None:
    """A drained node keeps serving while its copies move; afterwards it can
    be removed and killed with nothing lost.  An undrained node cannot be
    removed (exit 1, one line saying why); undrain returns a node to service."""
    with cluster4(tmp_path) as c:
        appended = fill(c.url)
        refused = cli(c.url, "nodes", "remove", "3")
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            "error: node 3 is not drained: run 'logstrand drain 3 --wait' first"
        ]
        ok(c.url, "drain", "2", "--wait")  # and back: undrain
        assert storage_state(c.url, 2) == "AUTHORITATIVE_EMPTY"
        ok(c.url, "undrain", "2")
        assert storage_state(c.url, 2) == "FULLY_AUTHORITATIVE"
        bad = cli(c.url, "undrain", "2")
        assert bad.returncode == 1
        assert "node 2 is not drained" in bad.stderr
        out = ok(c.url, "drain", "4", "--wait")
        assert "AUTHORITATIVE_EMPTY" in out
        assert c.alive(4)
        ok(c.url, "nodes", "remove", "4")
        c.kill_node(4)
        c.kill_node(3)  # and one more: the drained copies must be on 1..3
        check_all_read(c.url, appended)
        with connect(c.url) as client:
            client.append(1, b"after")  # appends go on without node 4


def test_node_returning_with_its_data_aborts_its_rebuilding(tmp_path: Path) -> None:
    """RebuildingTest.NodeComesBackAfterRebuildingIsComplete's sibling: the
    node comes back (data intact) while it is being rebuilt: the rebuilding
    aborts, it is FULLY_AUTHORITATIVE again, nothing duplicated or lost."""
    with cluster4(tmp_path, node_args=("--rebuild-rate", "20KiB")) as c:
        appended = fill(c.url, batches=20)
        c.kill_node(4)
        ok(c.url, "rebuild", "4")
        wait_for(lambda: storage_state(c.url, 4) == "REBUILDING", 10, "REBUILDING")
        c.start_node(4)
        wait_for(lambda: storage_state(c.url, 4) == "FULLY_AUTHORITATIVE", 20, "the abort")
        doc = state(c.url)
        assert doc["rebuilding"] is None
        check_all_read(c.url, appended)


def test_wiped_node_is_detected_and_rebuilt_without_false_dataloss(tmp_path: Path) -> None:
    """A node restarts with an empty directory: it asks to be rebuilt itself;
    readers meanwhile never count it (no false DATALOSS); once rebuilt it is
    back in service, and losing another node then loses nothing."""
    with cluster4(tmp_path) as c:
        appended = fill(c.url)
        c.stop_node(4)
        c.wipe_node(4)
        c.start_node(4)
        assert storage_state(c.url, 4) == "REBUILDING"
        check_all_read(c.url, appended)  # while it is being rebuilt
        wait_for(lambda: storage_state(c.url, 4) == "FULLY_AUTHORITATIVE", 60, "the rebuilding")
        last = state(c.url)["last"]
        assert isinstance(last, dict)
        assert last["nodes"] == [4]
        assert last["records"] > 0
        c.kill_node(2)
        check_all_read(c.url, appended)


def test_self_initiated_rebuilding_after_the_grace_period(tmp_path: Path) -> None:
    with cluster4(tmp_path, rebuild_grace_ms=3000) as c:
        appended = fill(c.url, batches=3)
        c.kill_node(3)
        wait_for(
            lambda: storage_state(c.url, 3) == "AUTHORITATIVE_EMPTY", 60, "self-initiated rebuild"
        )
        assert state(c.url)["last"]["nodes"] == [3]
        c.kill_node(4)
        check_all_read(c.url, appended)


def test_donor_killed_mid_rebuild_resumes_from_its_progress(tmp_path: Path) -> None:
    """RebuildingTest.DonorNodeRestarts: a donor killed mid-run continues
    from its persisted progress, and every copy is re-created exactly once."""
    with cluster4(tmp_path, node_args=("--rebuild-rate", "50KiB")) as c:
        appended = fill(c.url, batches=30, size=200)
        with connect(c.url) as client:
            tails = {str(log): client.tail_lsn(log) for log in LOGS}
        c.stop_node(4)
        held = len(copies(c, [4]))
        c.wipe_node(4)
        ok(c.url, "rebuild", "4")

        # The sequencer's node holds a copy of each of its records, so which
        # donors have much to re-create depends on where the sequencers ran.
        midway: list[str] = []

        def a_donor_midway() -> bool:
            run = state(c.url)["rebuilding"]
            if not isinstance(run, dict):
                return False
            for donor, p in sorted(run["per_donor"].items()):
                # Part way: a log not walked to its end yet.  (A donor at the
                # end of every log may save "done" before the kill lands, and
                # then has nothing to resume: it was picked so once.)
                behind = any(p["logs"].get(log, 0) < tail for log, tail in tails.items())
                if p["records"] > 0 and not p["done"] and behind:
                    midway.append(donor)
                    return True
            return False

        wait_for(a_donor_midway, 60, "a donor to be part way")
        donor = int(midway[0])
        run = state(c.url)["rebuilding"]
        assert isinstance(run, dict)
        before = run["per_donor"][midway[0]]["logs"]
        c.kill_node(donor)
        c.start_node(donor)
        wait_for(lambda: storage_state(c.url, 4) == "AUTHORITATIVE_EMPTY", 120, "the rebuilding")
        last = state(c.url)["last"]
        assert isinstance(last, dict)
        assert last["records"] == held  # nothing done twice, nothing missed
        log_lines = (c.directory / "logs" / f"node{donor}.log").read_text()
        assert "resuming" in log_lines, before
        c.kill_node(next(n for n in (1, 2, 3) if n != donor))
        check_all_read(c.url, appended)


def test_a_rebuilding_ends_while_a_log_is_appended_to_without_pause(tmp_path: Path) -> None:
    """Appends that never pause always leave copies above their log's
    release pointer on the donors; copies stored after the walk began need
    no walk (the rebuilt node left every copyset by then), so the run ends
    while the appends go on.  It waited for them to stop: ``bench/rebuild.py``'s
    appender held a run open 600 s."""
    with cluster4(tmp_path) as c:
        appended = fill(c.url, batches=5)
        c.stop_node(4)
        c.wipe_node(4)
        stop = threading.Event()
        written: list[bytes] = []

        def appender() -> None:
            with connect(c.url) as client:
                while not stop.is_set():
                    payloads = [os.urandom(100) for _ in range(50)]
                    client.append_batch(1, payloads)
                    written.extend(payloads)

        thread = threading.Thread(target=appender)
        thread.start()
        try:
            ok(c.url, "rebuild", "4")
            wait_for(
                lambda: storage_state(c.url, 4) == "AUTHORITATIVE_EMPTY",
                30,
                "the rebuilding to end while appends go on",
            )
            assert thread.is_alive()
            assert written
        finally:
            stop.set()
            thread.join()
        appended[1].update(written)
        check_all_read(c.url, appended)


def test_a_donor_keeps_to_its_rebuild_rate(tmp_path: Path) -> None:
    """``--rebuild-rate``: a donor sends its new copies at the rate set (a
    byte rate per donor, LogDevice's rebuilding rate limiter), within 10%,
    measured from its ``logstrand_rebuilding_bytes_total`` over 3 s of its walk
    once its first second's burst is spent."""
    rate = 200 * 1024
    donors = (1, 2, 3)
    with cluster4(tmp_path, node_args=("--rebuild-rate", "200KiB")) as c:
        # Batches of 20 KB: the counts move in steps of 10% of a second's rate.
        # About 3 MB a donor (15 s of walk at the rate): a donor whose share of
        # the lost copies is small must still be walking after the 3 s
        # measured (with 1.5 MB, one under a loaded machine's late scrapes
        # was done by then: make test saw it, before and after issue 54).
        fill(c.url, batches=300, per_batch=20, size=1000)
        c.stop_node(4)
        c.wipe_node(4)
        ok(c.url, "rebuild", "4")

        def sent() -> dict[int, float]:
            return {d: c.metric(d, "logstrand_rebuilding_bytes_total", 0.0) for d in donors}

        wait_for(lambda: max(sent().values()) > 2 * rate, 30, "a donor past its first burst")
        t0, before = time.monotonic(), sent()
        time.sleep(3)
        t1, after = time.monotonic(), sent()
        run = state(c.url)["rebuilding"]
        assert isinstance(run, dict), "the rebuilding ended within the 3 s measured"
        busy = [d for d in donors if before[d] > 2 * rate and not run["per_donor"][str(d)]["done"]]
        assert busy
        for d in busy:
            measured = (after[d] - before[d]) / (t1 - t0)
            assert abs(measured - rate) <= 0.1 * rate, (d, measured, rate)
        wait_for(lambda: storage_state(c.url, 4) == "AUTHORITATIVE_EMPTY", 120, "the rebuilding")


def test_rolling_rebuilding_under_load(tmp_path: Path) -> None:
    """RebuildingTest.RollingRebuilding: three of the cluster's four nodes in
    turn are lost (killed, directory deleted), rebuilt, and started again empty, while
    a client appends; nothing is lost, and in the end every record has R
    copies.  Later rounds rebuild copies that earlier rounds placed, so they
    need the copysets that earlier rounds amended."""
    with cluster4(tmp_path) as c:
        appended = fill(c.url, batches=5)
        stop = threading.Event()
        more: Appended = {log: set() for log in LOGS}

        def writer() -> None:
            with connect(c.url) as client:
                i = 0
                while not stop.is_set():
                    log = LOGS[i % len(LOGS)]
                    payloads = [os.urandom(50) for _ in range(20)]
                    client.append_batch(log, payloads)
                    more[log].update(payloads)
                    i += 1
                    time.sleep(0.02)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for n in (1, 2, 3):  # three rounds: the later ones need the earlier amends
                c.kill_node(n)
                c.wipe_node(n)
                out = ok(c.url, "rebuild", str(n), "--wait")
                assert "AUTHORITATIVE_EMPTY" in out, out
                c.start_node(n)
                wait_for(
                    lambda n=n: storage_state(c.url, n) == "FULLY_AUTHORITATIVE",
                    20,
                    f"node {n} back in service",
                )
        finally:
            stop.set()
            thread.join()
        for log in LOGS:
            appended[log] |= more[log]
        # Sequencers die with their nodes here, and appends are retried
        # across the failovers: idempotent appends store each payload once.
        read = check_all_read(c.url, appended)
        for n in (1, 2, 3, 4):
            c.stop_node(n)
        count = copies(c, [1, 2, 3, 4])
        # Every record read has copies, and nothing else does.
        assert len(count) == read
        # At least R: a recovery after each kill may write its decisions for
        # batches in flight on other nodes than the dead sequencer's waves did.
        assert min(count.values()) >= 2, Counter(count.values())

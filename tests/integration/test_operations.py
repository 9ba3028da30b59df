"""Operating a cluster through the CLI, as a user types it: trim, info, status,
retention that gives disk space back, and one-line errors with exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

import logstrand
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

FAST_MAINTENANCE = ("--partition-duration", "1s", "--maintenance-interval", "0.3")


def cli(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOGSTRAND_URL": url, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "logstrand", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def ok(url: str, *args: str, stdin: str | None = None) -> str:
    done = cli(url, *args, stdin=stdin)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def error(url: str, code: int, *args: str) -> str:
    done = cli(url, *args)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    return lines[0]


def scrape_all(c: LocalCluster) -> dict[str, float]:
    """Every node's /metrics, samples summed over the nodes."""
    total: dict[str, float] = {}
    for cfg in c.nodes.values():
        with urllib.request.urlopen(f"http://127.0.0.1:{cfg.metrics_port}/metrics") as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                name = name.replace(f'node="{cfg.node_id}"', "").replace("{}", "")
                total[name] = total.get(name, 0.0) + float(value)
    return total


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_trim_info_status_and_errors_from_the_cli(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3, node_args=FAST_MAINTENANCE) as c:
        url = c.url
        ok(url, "logs", "create", "1..10", "--replication", "2")
        lines = "".join(f"record {i}\n" for i in range(100))
        lsns = json.loads(ok(url, "append", "1", "--json", stdin=lines))["lsns"]
        assert len(lsns) == 100

        info = json.loads(ok(url, "info", "1", "--json"))
        assert info["tail"] >= lsns[-1]
        assert info["head"] == 0
        assert info["records_approx"] == 100
        assert info["replication_factor"] == 2
        assert len(info["nodeset"]) == 3
        assert info["sequencer_node"] in (1, 2, 3)
        assert info["oldest_timestamp_ms"] <= info["newest_timestamp_ms"]
        human = ok(url, "info", "1")
        assert "(approximate)" in human
        assert "head (trim point)" in human

        out = ok(url, "trim", "1", "--to", str(lsns[49]))
        assert "trimmed to" in out
        items = [json.loads(x) for x in ok(url, "read", "1", "--json").splitlines()]
        assert items[0]["gap"] == "TRIM"
        assert items[0]["hi"] == lsns[49]
        records = [x for x in items if "lsn" in x]
        assert [x["lsn"] for x in records] == lsns[50:]
        assert json.loads(ok(url, "info", "1", "--json"))["head"] == lsns[49]

        # Into a file (with a progress bar on a terminal): the same items.
        out = tmp_path / "log1.jsonl"
        done = cli(url, "read", "1", "--output", str(out))
        assert done.returncode == 0, done.stderr
        assert "wrote 50 records" in done.stderr
        assert [json.loads(x) for x in out.read_text().splitlines()] == items

        # Every node's metrics, as Prometheus scrapes them.
        metrics = scrape_all(c)
        assert metrics["logstrand_read_records_total"] >= 50
        assert metrics["logstrand_trims_total"] >= 3
        assert metrics['logstrand_read_gaps_total{type="trim"}'] >= 1
        assert metrics["logstrand_store_records_total"] >= 200  # 100 records, R=2
        assert metrics["logstrand_sequencer_activations_total"] >= 1
        assert metrics["logstrand_partitions"] >= 3
        assert metrics["logstrand_disk_bytes"] > 0
        assert metrics['logstrand_logsdb_written_bytes{kind="user"}'] > 0
        assert "logstrand_logsdb_write_amplification" in metrics
        assert "logstrand_recovery_seconds_count" in metrics

        status = json.loads(ok(url, "status", "--json"))
        assert status["epoch_store"] == url
        nodes = status["nodes"]
        assert [n["node_id"] for n in nodes] == [1, 2, 3]
        for n in nodes:
            host, port = n["address"].split(":")
            assert host == "127.0.0.1"
            assert int(port) > 0
            assert n["state"] == "alive"
            assert n["partitions"] >= 1
            assert n["disk_bytes"] > 0
        assert [1] in [n["sequencing"] for n in nodes]
        # Records were given to LogsDB: its write amplification is shown
        # (0.0 while they are all still in the memtable).
        assert any(n["write_amplification"] is not None for n in nodes)
        assert "epoch store" in ok(url, "status")
        assert "write amp" in ok(url, "status")

        # Bad input: one line, the right exit code, nothing changed.
        msg = error(url, 2, "trim", "1", "--to", str(lsns[-1] + 1000))
        assert "tail" in msg
        assert "--older-than" in error(url, 2, "trim", "1", "--older-than", "7x")
        assert "log 999" in error(url, 1, "info", "999")
        assert "log 999" in error(url, 1, "trim", "999", "--to", "e1n5")
        error(url, 2, "trim", "1")  # neither --to nor --older-than
        error(url, 2, "trim", "1", "--to", "nonsense")
        assert json.loads(ok(url, "info", "1", "--json"))["head"] == lsns[49]

        # A node that is down when a log is trimmed gets the trim when it is back.
        c.stop_node(3)
        ok(url, "trim", "1", "--to", str(lsns[79]))
        c.start_node(3)
        deadline = time.monotonic() + 20
        while True:
            info = json.loads(ok(url, "info", "1", "--json"))
            if info["nodes_answered"] == 3 and info["head"] == lsns[79]:
                break
            assert time.monotonic() < deadline, info
            time.sleep(0.3)
        status = json.loads(ok(url, "status", "--json"))
        assert all(n["state"] == "alive" for n in status["nodes"])
        items = [json.loads(x) for x in ok(url, "read", "1", "--json").splitlines()]
        assert [x["lsn"] for x in items if "lsn" in x] == lsns[80:]

        # --older-than: everything older than a moment ago goes.
        time.sleep(1.0)
        ok(url, "trim", "1", "--older-than", "500ms")
        items = [json.loads(x) for x in ok(url, "read", "1", "--json").splitlines()]
        assert [x for x in items if "lsn" in x] == []

        # Status says when a node is dead, and exits 1.
        c.kill_node(2)
        deadline = time.monotonic() + 20
        while True:
            done = cli(url, "status", "--json")
            states = {n["node_id"]: n["state"] for n in json.loads(done.stdout)["nodes"]}
            if states[2] == "dead":
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.3)
        assert done.returncode == 1


def test_retention_trims_by_time_and_gives_disk_space_back(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3, node_args=FAST_MAINTENANCE) as c:
        url = c.url
        # Retention well above the 3.3 s the appends take, so that nothing is
        # trimmed before the partitions are counted, even on a loaded machine.
        ok(url, "logs", "create", "1", "--replication", "3", "--retention", "8s")
        batches = []
        with logstrand.connect(url) as client:
            for i in range(4):  # four partitions' worth, 1.1 s apart
                if i:
                    time.sleep(1.1)
                # Incompressible: what is on disk is what was written.
                batches.append(
                    client.append_batch(1, [os.urandom(500).hex().encode() for _ in range(2000)])
                )
        nodes = [tmp_path / "c" / f"node{i}" for i in (1, 2, 3)]
        before = sum(dir_bytes(n) for n in nodes)
        partitions_before = sum(
            n["partitions"] for n in json.loads(ok(url, "status", "--json"))["nodes"]
        )
        assert partitions_before >= 9  # three nodes, three or four partitions each
        # Retention trims whole partitions' worth of records older than 5 s, and
        # drops the partitions; the newest partition stays (it takes the writes).
        deadline = time.monotonic() + 45
        while True:
            items = [json.loads(x) for x in ok(url, "read", "1", "--json").splitlines()]
            status = json.loads(ok(url, "status", "--json"))
            partitions = sum(n["partitions"] for n in status["nodes"])
            kept = [x["lsn"] for x in items if "lsn" in x]
            # Each node trims at its own partitions' boundaries; the newest
            # partition (one per node) keeps the end of the last batch.
            if partitions == 3 and kept == batches[-1][len(batches[-1]) - len(kept) :]:
                break
            assert time.monotonic() < deadline, (partitions_before, partitions, len(kept))
            time.sleep(0.5)
        gaps = [x for x in items if "gap" in x]
        assert {g["gap"] for g in gaps} == {"TRIM"}, gaps
        assert gaps[0]["lo"] <= batches[0][0]
        assert gaps[-1]["hi"] >= batches[-2][-1]
        after = sum(dir_bytes(n) for n in nodes)
        print(f"three nodes' LogsDB directories: {before:,} -> {after:,} bytes")
        # 24 MB of copies were written, three quarters of them are gone from
        # disk (the newest partition and RocksDB's own files stay).
        assert after < before * 0.5, (before, after)


def test_retention_by_space_keeps_about_the_bound(tmp_path: Path) -> None:
    """``--retention-bytes``: the oldest records go once the log holds more than
    its bound (each node keeps its share, R copies over the nodeset)."""
    with LocalCluster(tmp_path / "c", nodes=3, node_args=FAST_MAINTENANCE) as c:
        url = c.url
        ok(url, "logs", "create", "1", "--replication", "2", "--retention-bytes", "2MiB")
        shown = json.loads(ok(url, "logs", "show", "1", "--json"))
        assert shown["attributes"]["retention_bytes"] == 2 * 1024 * 1024
        batches = []
        for i in range(5):  # five partitions' worth of 1 MB each, 1.1 s apart
            if i:
                time.sleep(1.1)
            text = "".join(f"{os.urandom(500).hex()}\n" for _ in range(1000))
            batches.append(json.loads(ok(url, "append", "1", "--json", stdin=text))["lsns"])
        everything = [x for b in batches for x in b]
        deadline = time.monotonic() + 40
        last: list[int] = []
        while True:
            # Until the oldest records are gone and two reads agree (nodes trim
            # at their own partitions' boundaries, each a little apart: the
            # reader may meet more than one TRIM gap before the first record).
            items = [json.loads(x) for x in ok(url, "read", "1", "--json").splitlines()]
            kept = [x["lsn"] for x in items if "lsn" in x]
            gaps = {x["gap"] for x in items if "gap" in x}
            if kept and kept[0] > batches[0][0] and kept == last and gaps == {"TRIM"}:
                break
            assert time.monotonic() < deadline, (len(kept), gaps)
            last = kept
            time.sleep(0.5)
        assert kept == everything[-len(kept) :]  # the newest records, in order
        print(f"{len(kept)} of {len(everything)} records kept")
        # At least 2 MiB of 1 kB records stay (as Kafka keeps retention.bytes),
        # and whole partitions go.  Each node counts the log's bytes over the
        # LSNs it spans: five 1 MB batches fall on few copysets, and a node
        # that counted only its own copies against a share of the bound kept
        # 1,673 records once.
        assert 2000 <= len(kept) <= 4000, len(kept)
        # The log is quiet now and partitions keep rolling (one a second): its
        # newest records sit in older partitions, and they stay. (They went:
        # a node trimmed a log whose newest partition held none of it to nothing.)
        time.sleep(3)
        items = [json.loads(x) for x in ok(url, "read", "1", "--json").splitlines()]
        assert [x["lsn"] for x in items if "lsn" in x] == kept
        assert "more than 0" in error(url, 2, "logs", "create", "2", "--retention-bytes", "0")


def test_a_node_down_while_a_log_is_trimmed_applies_the_trim_when_it_is_back(
    tmp_path: Path,
) -> None:
    """It missed the TRIM: its first maintenance pass reads every trim point."""
    from logstrand.logsdb import LogsDB

    with LocalCluster(tmp_path / "c", nodes=3, node_args=FAST_MAINTENANCE) as c:
        url = c.url
        ok(url, "logs", "create", "1..3", "--replication", "3")
        lines = "".join(f"record {i}\n" for i in range(100))
        lsns = json.loads(ok(url, "append", "1", "--json", stdin=lines))["lsns"]
        c.stop_node(3)
        ok(url, "trim", "1", "--to", str(lsns[49]))
        c.start_node(3)
        time.sleep(1.5)  # five maintenance passes
    with LogsDB.open(tmp_path / "c" / "node3") as db:
        assert db.trim_point(1) == lsns[49]
        assert db.trim_point(2) == 0

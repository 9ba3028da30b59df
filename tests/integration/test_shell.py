"""The CLI in a shell: stdout a pipe, as `| grep`, `| wc -l` and scripts see it."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster
from logstrand.types import format_lsn

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("shell") / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 9, LogAttributes(replication_factor=2))
        yield c


def cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "logstrand", *args, "--url", cluster.url],
        capture_output=True,  # stdout a pipe
        text=True,
        timeout=60,
        env=env,
    )


def ok(cluster: LocalCluster, *args: str) -> str:
    done = cli(cluster, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_read_prints_one_line_per_record_into_a_pipe(cluster: LocalCluster) -> None:
    long = b"y" * 300
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(
            1, [b"two\nlines", long, b"bin\x00\xff"], keys=[b"a", b"b", b"c"]
        )
    lines = ok(cluster, "read", "1").splitlines()
    assert len(lines) == 3  # wrapped at 80 columns before: 8 lines
    assert lines[0] == f"{format_lsn(lsns[0])}\t{_ts(cluster, lsns[0])}\ttwo\\nlines"
    assert lines[1].endswith("\t" + "y" * 300)
    assert lines[2].endswith("\tbin\\x00\\xff")
    out = ok(cluster, "read", "1", "--format", "%o %k %S\\n")
    assert out.splitlines() == [f"{lsns[0]} a 9", f"{lsns[1]} b 300", f"{lsns[2]} c 5"]
    bad = cli(cluster, "read", "1", "--format", "%z")
    assert bad.returncode == 2
    assert "unknown field %z" in bad.stderr


def _ts(cluster: LocalCluster, lsn: int) -> int:
    with logstrand.connect(cluster.url) as client:
        [record] = [x for x in client.read(1, lsn, lsn) if isinstance(x, logstrand.Record)]
        return record.timestamp


def test_from_takes_words_lsns_and_times(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(2, [b"a", b"b", b"c"])
    for word in ("beginning", "earliest", "oldest"):
        assert len(ok(cluster, "read", "2", "--from", word).splitlines()) == 3, word
    for word in ("end", "tail", "latest", "now"):
        assert ok(cluster, "read", "2", "--from", word) == "", word
    assert len(ok(cluster, "read", "2", "--from", format_lsn(lsns[1])).splitlines()) == 2
    assert len(ok(cluster, "read", "2", "--from", "10m ago").splitlines()) == 3
    bad = cli(cluster, "read", "2", "--from", "sometime")
    assert bad.returncode == 2
    assert "--from" in bad.stderr


def test_read_as_a_group_commits_what_it_printed(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        client.append_batch(3, [b"a", b"b"])
    assert len(ok(cluster, "read", "3", "--group", "shell").splitlines()) == 2
    assert ok(cluster, "read", "3", "--group", "shell") == ""  # nothing new
    with logstrand.connect(cluster.url) as client:
        lsn = client.append(3, b"c")
        assert client.committed("shell", 3) == lsn - 1
    assert ok(cluster, "read", "3", "-g", "shell").splitlines()[0].endswith("\tc")
    both = cli(cluster, "read", "3", "--group", "shell", "--from", "e1n1")
    assert both.returncode == 2


def test_a_bare_small_number_is_no_trim_point(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        client.append_batch(4, [b"a", b"b"])
    done = cli(cluster, "trim", "4", "--to", "5000")
    assert done.returncode == 2
    assert "e0n5000" in done.stderr
    assert "e1n5000" in done.stderr
    assert len(ok(cluster, "read", "4").splitlines()) == 2  # nothing trimmed


def test_tables_print_whole_into_a_pipe(cluster: LocalCluster) -> None:
    out = ok(cluster, "status")
    assert "…" not in out
    for cfg in cluster.nodes.values():
        assert cfg.address in out
    assert "…" not in ok(cluster, "logs", "list")


def test_a_mistyped_url_is_refused_and_creates_nothing(tmp_path: Any) -> None:
    url = f"sqlite://{tmp_path}/nowhere/cluster.db"
    done = subprocess.run(
        [sys.executable, "-m", "logstrand", "logs", "list", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "no cluster at" in done.stderr
    assert not (tmp_path / "nowhere").exists()

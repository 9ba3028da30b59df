"""The CLI's edges, as the adversarial run found them: binary stdin cut into
records at newline bytes, a fan-out's exception group printed as a
100-line traceback (and raised by the library), node id 0, durations of
10^17 days, and log ids in digits that are not ASCII."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster
from tests.integration.test_operations import error

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BINARY = bytes(range(256)) * 64  # newline bytes, NULs, and no UTF-8


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalCluster(tmp_path_factory.mktemp("edges"), nodes=3) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=2))
        yield cluster.url


def run(url: str, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LOGSTRAND_URL": url, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "logstrand", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
    )


def payloads(url: str, log: int) -> list[bytes]:
    with logstrand.connect(url) as client:
        tail = client.tail_lsn(log)
        return [r.payload for r in client.read(log, 1, tail) if isinstance(r, logstrand.Record)]


def test_binary_stdin_is_refused_in_line_mode_and_taken_on_purpose(
    url: str, tmp_path: Path
) -> None:
    done = run(url, "append", "1", stdin=BINARY)
    assert done.returncode == 2
    message = done.stderr.decode().strip()
    assert message.startswith("error: line 1 of stdin is not text")
    assert "--binary" in message
    assert len(message.splitlines()) == 1
    assert payloads(url, 1) == []  # nothing was cut into records
    # Text, then a binary line: the text before it goes in, then it stops.
    done = run(url, "append", "1", stdin=b"one\ntwo\n\xff\xfe\nthree\n")
    assert done.returncode == 2
    assert b"line 3 of stdin is not text" in done.stderr
    assert payloads(url, 1) == [b"one", b"two"]
    # --binary: all of stdin, one record, byte for byte.
    assert run(url, "append", "2", "--binary", stdin=BINARY).returncode == 0
    assert payloads(url, 2) == [BINARY]
    # --delimiter: records cut at a byte, with no text check.
    done = run(url, "append", "3", "--delimiter", "\\0", stdin=b"a\xff\x00b\n\x00c")
    assert done.returncode == 0, done.stderr
    assert payloads(url, 3) == [b"a\xff", b"b\n", b"c"]
    # --record-per-file: each file, one record.
    (tmp_path / "x.bin").write_bytes(BINARY[:300])
    (tmp_path / "y.bin").write_bytes(b"\x00\x01")
    files = [str(tmp_path / "x.bin"), str(tmp_path / "y.bin")]
    assert run(url, "append", "4", "--record-per-file", *files, stdin=b"").returncode == 0
    assert payloads(url, 4) == [BINARY[:300], b"\x00\x01"]
    assert "not one byte" in error(url, 2, "append", "5", "--delimiter", "ab")
    assert "at most one of" in error(url, 2, "append", "5", "--binary", "--delimiter", ",")


def test_ids_durations_and_sizes_are_checked(url: str) -> None:
    assert "node id" in error(url, 2, "nodes", "add", "--id", "0", "--address", "127.0.0.1:5000")
    assert "digits 0-9" in error(url, 2, "logs", "create", "\U0001d7d9")  # a mathematical 1
    assert "digits 0-9" in error(url, 2, "info", "\U0001d7d9")
    assert "more than" in error(url, 2, "logs", "create", "20", "--retention", "99999999999999999d")
    assert "whole number" in error(url, 2, "logs", "create", "20", "--retention", "0.5ms")
    assert "log 999 does not exist" in error(url, 1, "logs", "rebalance", "999")
    with logstrand.connect(url) as client, pytest.raises(logstrand.InvalidArgumentError):
        client.rebalance([1], step=0)
    with open_epoch_store(url) as store:
        assert 0 not in store.nodes()
        assert all(r.first != 20 for r in store.log_ranges())


def test_a_refused_fan_out_is_one_error(tmp_path: Path) -> None:
    """Without a token, every node refuses: one line from the CLI, and one
    AccessDeniedError from the library, for each call that asks every node."""
    with LocalCluster(tmp_path, nodes=3, secure=True) as cluster:
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 3, LogAttributes(replication_factor=2))
        assert cluster.ca_path is not None
        env = {**os.environ, "LOGSTRAND_CA": cluster.ca_path}
        env.pop("LOGSTRAND_TOKEN", None)
        for args in (("find-time", "1", "now"), ("trim", "1", "--to", "e1n5"), ("info", "1")):
            done = subprocess.run(
                [sys.executable, "-m", "logstrand", *args, "--url", cluster.url],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 1, (args, done.stderr)
            assert len(lines) == 1, (args, done.stderr)
            assert lines[0].startswith("error: "), done.stderr
            assert "ACCESS" in lines[0]
        with logstrand.connect(cluster.url, ca=cluster.ca_path) as client:
            for call in (
                lambda: client.find_time(1, 0),
                lambda: client.tail_lsn(1),
                lambda: client.trim(1, 5),
            ):
                with pytest.raises(logstrand.AccessDeniedError):
                    call()


def test_headers_go_in_with_append_and_come_out_of_read(url: str) -> None:
    """``append -H NAME=VALUE`` (kcat's -H) on one record and on lines of
    stdin; ``read --format %h`` and ``--json`` show them."""
    done = run(url, "append", "6", "one", "-H", "src=cli", "-H", "flag", stdin=b"")
    assert done.returncode == 0, done.stderr
    done = run(url, "append", "6", "--header", "src=pipe", stdin=b"two\nthree\n")
    assert done.returncode == 0, done.stderr
    out = run(url, "read", "6", "--format", "%s [%h]\\n", stdin=b"")
    assert out.stdout.decode().splitlines() == [
        "one [src=cli,flag]",
        "two [src=pipe]",
        "three [src=pipe]",
    ]
    lines = run(url, "read", "6", "--json", stdin=b"").stdout.decode().splitlines()
    assert '"headers": [["src", "cli"], ["flag", null]]' in lines[0]
    assert "give NAME=VALUE" in error(url, 2, "append", "6", "x", "-H", "=v")

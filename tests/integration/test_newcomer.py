"""What a newcomer following README.md tripped over (issue 55), each through
the command line as they ran it: the demo run twice, users and grants sent
to the wrong cluster, a secure cluster read without credentials, and the
small ones (options' places, LSNs typed wrong, trims that changed nothing,
a log of a wider range, internal logs' names, the metrics port, the dirty
ratio after a pass)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

#: What a shell may have set from an earlier cluster: none of it leaks in.
_CLEAN = {
    k: v for k, v in os.environ.items() if not k.startswith("LOGSTRAND_") and k != "KAFKA_BOOTSTRAP"
}


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str]:
    """``logstrand ARGS`` as a user runs it: exit code, stdout and stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "logstrand", *args],
        capture_output=True,
        text=True,
        env={**_CLEAN, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("plain"), nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=2))
            store.create_logs(20, 20, LogAttributes(replication_factor=2, cleanup_policy="compact"))
        yield c


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("secure"), nodes=2, secure=True) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=2))
        yield c


def test_the_demo_run_twice_starts_clean(tmp_path: Path) -> None:
    """`make run` again read the first run's log 3 too: "200,001 records,
    no gaps: False" (an epoch bridge counted as a record), and no find_time."""
    demo = tmp_path / "demo"
    code, first = cli("dev", "demo", "--dir", str(demo))
    assert code == 0, first
    code, second = cli("dev", "demo", "--dir", str(demo))
    assert code == 0, second
    assert "removed the previous demo's data" in second
    assert "-> 100,000 records in" in second
    assert "gaps: 0" in second
    assert "find_time(3, " in second
    # A directory the demo did not make is never emptied.
    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    code, out = cli("dev", "demo", "--dir", str(other))
    assert code == 1
    assert "holds something other than a demo's data" in out
    assert (other / "notes.txt").read_text() == "keep me"


def test_users_and_grants_refuse_a_cluster_without_tls_while_credentials_are_set(
    plain: LocalCluster, secure: LocalCluster
) -> None:
    """README's security block after its earlier `export LOGSTRAND_URL` of
    the development cluster: `users add` printed a token and exit 0, and the
    user landed in the insecure cluster."""
    creds = {
        "LOGSTRAND_URL": plain.url,
        "LOGSTRAND_CA": str(secure.directory / "tls" / "ca.pem"),
        "LOGSTRAND_TOKEN_FILE": str(secure.directory / "admin.token"),
    }
    for args in (("users", "add", "etl"), ("acl", "grant", "etl", "--logs", "1", "--ops", "read")):
        code, out = cli(*args, env=creds)
        assert code == 2, out
        assert "a cluster without TLS" in out
        assert "LOGSTRAND_CA" in out
    with open_epoch_store(plain.url) as store:
        assert "etl" not in store.security()["users"]
    # Aimed at the secure cluster, the same command works; and with the
    # credentials unset, the insecure cluster takes users as before.
    code, out = cli("users", "add", "etl", env={**creds, "LOGSTRAND_URL": secure.url})
    assert code == 0, out
    code, out = cli("users", "add", "etl", env={"LOGSTRAND_URL": plain.url})
    assert code == 0, out


def test_a_secure_cluster_read_without_credentials_says_to_give_them(
    secure: LocalCluster,
) -> None:
    """It said "this user may not read it (it needs a grant of 'read' ...)"."""
    for env in ({}, {"LOGSTRAND_CA": str(secure.directory / "tls" / "ca.pem")}):
        code, out = cli("read", "5", env={"LOGSTRAND_URL": secure.url, **env})
        assert code == 1, out
        assert "grant" not in out
        assert "token" in out
    with (
        logstrand.connect(secure.url) as client,
        pytest.raises(logstrand.NotAuthenticatedError, match="speaks TLS"),
    ):
        list(client.read(5))


def test_small_things_a_newcomer_met(plain: LocalCluster, tmp_path: Path) -> None:
    url = plain.url
    # --url before the command, as --token and --ca go (and those after it).
    code, out = cli("--url", url, "logs", "list")
    assert code == 0, out
    code, out = cli("logs", "list", "--url", url, "--token", "unused-without-tls")
    assert code == 0, out
    # An LSN typed wrong is named as such, not as Python's int() error.
    code, out = cli("trim", "1", "--to", "bogus", "--url", url)
    assert code == 2
    assert "'bogus' is not an LSN" in out
    assert "invalid literal" not in out
    # A trim by age over logs with nothing that old: one line, not one per log.
    with logstrand.connect(url) as client:
        client.append(1, b"young")
    code, out = cli("trim", "1..10", "--older-than", "7d", "--url", url)
    assert code == 0, out
    assert out.strip() == "10 of 10 logs had nothing older than 7d: unchanged"
    # One log of a wider range: which range, not "no log range 5..5".
    code, out = cli("logs", "update", "5", "--retention", "1d", "--url", url)
    assert code == 1
    assert "log 5 is part of the range 1..10" in out
    code, out = cli("logs", "update", "50", "--retention", "1d", "--url", url)
    assert "log 50 is not in the configuration" in out
    # The groups' positions logs by the name grants take.
    with logstrand.connect(url) as client:
        client.commit("billing", 1, client.tail_lsn(1))
    code, out = cli("logs", "list", "--url", url)
    assert "positions (internal: consumer groups' positions)" in out
    assert str(1 << 63 | 1) not in out
    # The metrics port operations.md sends the reader to `nodes list` for.
    code, out = cli("nodes", "list", "--url", url)
    assert code == 0
    for cfg in plain.nodes.values():
        assert str(cfg.metrics_port) in out
    code, out = cli("nodes", "list", "--url", url, "--json")
    assert {n["metrics_port"] for n in json.loads(out)} == {
        cfg.metrics_port for cfg in plain.nodes.values()
    }


def test_the_dirty_ratio_is_low_after_a_pass_to_the_tail(plain: LocalCluster) -> None:
    """`logstrand info` showed 0.94 right after a pass that ran to the tail:
    the log's size kept the removed copies, and the clean bytes counted
    payloads only."""
    with logstrand.connect(plain.url) as client:
        for i in range(50):
            client.append(20, b'{"n": %d}' % i, key=b"user-%d" % (i % 5))
    code, out = cli("compact", "20", "--url", plain.url)
    assert code == 0, out
    code, out = cli("info", "20", "--json", "--url", plain.url)
    assert code == 0, out
    compaction = json.loads(out)["compaction"]
    assert compaction["dirty_ratio"] < 0.1, compaction

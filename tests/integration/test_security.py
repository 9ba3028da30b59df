"""A cluster with TLS, node certificates, tokens and grants (``dev up --secure``).

Shows what each principal is refused: a client without credentials, a
plain-text client, a read-only user, a user that sends node-to-node
messages, and a user that claims to be a node.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.batch import make_batch
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import Status
from logstrand.security import hash_token, new_token
from logstrand.testing import LocalCluster
from logstrand.types import Gap, GapType
from logstrand.wire import (
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    Hello,
    HelloAck,
    Release,
    Store,
    StoreReply,
    decode_body,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def secure(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    """A secure 3-node cluster; logs 1..10 (R=2); users ``reader`` (read on
    1..5) and ``writer`` (append and read on 1..5); their tokens."""
    with LocalCluster(tmp_path_factory.mktemp("secure"), nodes=3, secure=True) as c:
        tokens = {}
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=2))
            for name, ops in (("reader", {"read"}), ("writer", {"read", "append"})):
                tokens[name] = new_token()
                store.add_user(name, hash_token(tokens[name]))
                store.grant(name, 1, 5, frozenset(ops))
        time.sleep(2.5)  # the nodes re-read users and grants every 2 s
        yield c, tokens


def _client(cluster: LocalCluster, **creds: Any) -> logstrand.Client:
    return logstrand.connect(
        cluster.url,
        settings=logstrand.ClientSettings(append_timeout_s=5.0),
        **creds,
    )


def test_admin_appends_and_reads_over_tls(secure: tuple[LocalCluster, dict[str, str]]) -> None:
    cluster, _ = secure
    with _client(cluster, **cluster.client_options) as client:
        lsns = client.append_batch(1, [b"a", b"b", b"c"])
        got = [r.payload for r in client.read(1, lsns[0], lsns[-1])]
    assert got == [b"a", b"b", b"c"]
    assert oct(os.stat(cluster.directory / "admin.token").st_mode & 0o777) == "0o600"


def test_client_without_credentials_is_refused(secure: tuple[LocalCluster, dict[str, str]]) -> None:
    cluster, _ = secure
    assert cluster.ca_path is not None
    t0 = time.monotonic()
    with _client(cluster, ca=cluster.ca_path) as client, pytest.raises(logstrand.AccessDeniedError):
        client.append(1, b"x")
    bad_token = {"ca": cluster.ca_path, "token": "lst_not-a-token"}
    with (
        _client(cluster, **bad_token) as client,
        pytest.raises(logstrand.AccessDeniedError, match="unknown token"),
    ):
        client.append(1, b"x")
    assert time.monotonic() - t0 < 5.0


def test_plain_text_connection_to_a_tls_node_is_closed_at_once(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    cluster, _ = secure
    cfg = cluster.nodes[1]
    with socket.create_connection((cfg.host, cfg.port), timeout=5) as s:
        s.sendall(encode_frame(Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster.cluster)))
        t0 = time.monotonic()
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
        assert time.monotonic() - t0 < 1.0
        # One refusal in clear that says what to do, naming nothing of the
        # node (id 0, no version); then the connection is closed.
        ack = decode_body(data[4:]) if data else None
        assert isinstance(ack, HelloAck), data
        assert (ack.status, ack.node_id, ack.protocol) == (Status.ACCESS, 0, 0)
        assert "speaks TLS" in ack.message
        try:
            rest = s.recv(4096)
        except ConnectionResetError:  # closed with our Hello unread: a reset
            rest = b""
        assert rest == b""


def test_read_only_user_reads_and_is_refused_the_rest(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    cluster, tokens = secure
    assert cluster.ca_path is not None
    with _client(cluster, **cluster.client_options) as admin:
        lsn = admin.append(2, b"for the reader")
        admin.append(7, b"not for the reader")
    with _client(cluster, ca=cluster.ca_path, token=tokens["reader"]) as client:
        assert [r.payload for r in client.read(2, lsn, lsn)] == [b"for the reader"]
        with pytest.raises(logstrand.AccessDeniedError, match="may not append on log 2"):
            client.append(2, b"x")
        with pytest.raises(logstrand.AccessDeniedError, match="may not trim on log 2"):
            client.trim(2, lsn)
        with pytest.raises(logstrand.AccessDeniedError, match="log 7: this user may not read"):
            list(client.read(7, 1, 100))
        items = list(client.read(7, 1, 100, access_gaps=True))  # asked for: a gap
        assert len(items) == 1
        assert isinstance(items[0], Gap)
        assert items[0].type == GapType.ACCESS
    with _client(cluster, ca=cluster.ca_path, token=tokens["writer"]) as client:
        assert client.append(3, b"w") > 0
        with pytest.raises(logstrand.AccessDeniedError, match="may not append on log 6"):
            client.append(6, b"w")


def test_appends_to_logs_with_and_without_a_grant_gathered_in_one_request(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    """The writer may append to 1..5, not 6..10.  Appends to both, all at
    once, leave together in requests the node refuses as a whole (one of
    their logs lacks the grant); each goes again alone: the granted ones
    succeed, the others fail with the permission error, each its own."""
    cluster, tokens = secure
    assert cluster.ca_path is not None
    with _client(cluster, ca=cluster.ca_path, token=tokens["writer"]) as client:
        futures = {
            (log, i): client.append_async(log, b"%d" % i) for i in range(20) for log in (4, 5, 8)
        }
        client.flush(30)
        for (log, _), future in futures.items():
            if log == 8:
                assert isinstance(future.exception(), logstrand.AccessDeniedError)
                assert "may not append on log 8" in str(future.exception())
            else:
                assert future.exception() is None
        lsns = [futures[4, i].result() for i in range(20)]
        assert [r.payload for r in client.read(4, lsns[0], lsns[-1])] == [
            b"%d" % i for i in range(20)
        ]


async def test_tails_of_logs_without_a_grant_are_refused_with_the_permission_error(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    """``tail_lsns`` names the log the user may not read, as one error (not a
    group of them from its requests to each node)."""
    cluster, tokens = secure
    async with logstrand.open_client(
        cluster.url, ca=cluster.ca_path, token=tokens["reader"]
    ) as client:
        assert set(await client.tail_lsns([1, 2])) == {1, 2}
        with pytest.raises(logstrand.AccessDeniedError, match="may not read on log 7"):
            await client.tail_lsns([2, 7])


def _tls_raw(cluster: LocalCluster, token: str | None, node_id: int | None = None) -> Any:
    assert cluster.ca_path is not None
    ctx = ssl.create_default_context(cafile=cluster.ca_path)
    cfg = cluster.nodes[1]
    s = ctx.wrap_socket(
        socket.create_connection((cfg.host, cfg.port), timeout=5), server_hostname=cfg.host
    )
    s.sendall(
        encode_frame(
            Hello(PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX, cluster.cluster, node_id, token)
        )
    )
    return s


def _recv(s: Any) -> Any:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        chunk = s.recv(65536)
        if not chunk:
            return None
        buf += chunk
    return decode_body(buf[4 : 4 + int.from_bytes(buf[:4], "big")])


def test_node_messages_from_a_user_are_refused(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    cluster, tokens = secure
    s = _tls_raw(cluster, tokens["writer"])
    ack = _recv(s)
    assert isinstance(ack, HelloAck)
    assert ack.status == Status.OK
    batch = make_batch([(1 << 32) | 999], [b"forged"], timestamps_ms=1)
    s.sendall(encode_frame(Store.of(1, 2, 1, (1,), 0, True, batch)))
    reply = _recv(s)
    assert isinstance(reply, StoreReply)
    assert reply.status == Status.ACCESS
    s.sendall(encode_frame(Release(2, (1 << 32) | 999)))
    s.close()
    # A user may not claim to be a node.
    s = _tls_raw(cluster, tokens["writer"], node_id=2)
    ack = _recv(s)
    assert isinstance(ack, HelloAck)
    assert ack.status == Status.ACCESS
    assert "node certificate" in ack.message
    s.close()


def test_cli_users_and_acl(secure: tuple[LocalCluster, dict[str, str]]) -> None:
    cluster, _ = secure
    env = {**os.environ, **cluster.client_env()}

    def cli(
        *args: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "logstrand", *args],
            env={**env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )

    made = cli("users", "add", "carol")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("lst_")
    assert cli("acl", "grant", "carol", "--logs", "4..5", "--ops", "append").returncode == 0
    listed = cli("acl", "list", "--json")
    assert '"carol"' in listed.stdout
    time.sleep(2.5)
    as_carol = {"LOGSTRAND_TOKEN": token}
    ok = cli("append", "4", "hello", extra_env=as_carol)
    assert ok.returncode == 0, ok.stderr
    refused = cli("append", "1", "hello", extra_env=as_carol)
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "ACCESS" in refused.stderr
    # A read without the grant fails, one line, exit 1 (it printed a gap and exited 0).
    denied = cli("read", "1", extra_env=as_carol)
    assert denied.returncode == 1, denied.stdout
    assert denied.stderr.strip().splitlines() == [
        "error: log 1: this user may not read it (it needs a grant of 'read': logstrand acl "
        "grant USER --logs 1 --ops read) (ACCESS)"
    ]
    bad = cli("acl", "grant", "carol", "--logs", "4..5", "--ops", "fly")
    assert bad.returncode == 2
    assert "unknown operations" in bad.stderr
    assert cli("acl", "revoke", "carol", "--logs", "4", "--ops", "append").returncode == 0
    time.sleep(2.5)
    assert cli("append", "4", "again", extra_env=as_carol).returncode == 1
    assert cli("append", "5", "still", extra_env=as_carol).returncode == 0
    assert cli("users", "remove", "carol").returncode == 0
    time.sleep(2.5)
    assert cli("append", "5", "gone", extra_env=as_carol).returncode == 1


def test_a_client_without_tls_is_told_the_cluster_speaks_it(
    secure: tuple[LocalCluster, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain text at a TLS node: refused at once, saying what to pass (it
    waited 10 s for PEER_CLOSED before); the reverse too."""
    cluster, _ = secure
    for name in ("LOGSTRAND_CA", "LOGSTRAND_TOKEN", "LOGSTRAND_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    t0 = time.monotonic()
    with (
        pytest.raises(logstrand.AccessDeniedError, match=r"speaks TLS.*LOGSTRAND_CA"),
        _client(cluster) as client,
    ):
        client.append(2, b"x")
    assert time.monotonic() - t0 < 5.0
    done = subprocess.run(
        [sys.executable, "-m", "logstrand", "append", "2", "x", "--url", cluster.url],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("LOGSTRAND_")},
    )
    assert done.returncode == 1
    assert "speaks TLS" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_tls_client_is_told_the_cluster_does_not_speak_it(
    secure: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    cluster, tokens = secure
    assert cluster.ca_path is not None
    with LocalCluster(tmp_path / "plain", nodes=1) as plain:
        with open_epoch_store(plain.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=1))
        t0 = time.monotonic()
        with (
            pytest.raises(logstrand.AccessDeniedError, match="does not speak TLS"),
            _client(plain, ca=cluster.ca_path, token=tokens["writer"]) as client,
        ):
            client.append(1, b"x")
        assert time.monotonic() - t0 < 5.0


def test_a_member_of_a_group_needs_read_on_its_logs_and_the_group_s_positions(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    """``subscribe``'s heartbeats are checked as reads: of every log the
    member subscribes to, of its group's positions log, and of the group
    itself (a group grant)."""
    from logstrand.records import POSITIONS_LOGS

    cluster, tokens = secure
    assert cluster.ca_path is not None
    with _client(cluster, **cluster.client_options) as admin:
        admin.append(2, b"for the member")
    member_token = new_token()
    with open_epoch_store(cluster.url) as store:
        store.add_user("member", hash_token(member_token))
        store.grant("member", 1, 5, frozenset({"read"}))
        store.grant("member", POSITIONS_LOGS[0], POSITIONS_LOGS[-1], frozenset({"read", "append"}))
    time.sleep(2.5)  # the nodes re-read users and grants every 2 s
    with _client(cluster, ca=cluster.ca_path, token=member_token) as client:
        refused = client.subscribe("members", [2])
        with pytest.raises(logstrand.AccessDeniedError, match="may not read group members"):
            next(refused)
    with open_epoch_store(cluster.url) as store:
        store.grant_group("member", "members", frozenset({"read"}))
    time.sleep(1.1)  # a refusal reads them again, at most every second
    with _client(cluster, ca=cluster.ca_path, token=tokens["reader"]) as client:
        refused = client.subscribe("members", [1, 2])
        with pytest.raises(logstrand.AccessDeniedError, match="may not read on log"):
            next(refused)
    with _client(cluster, ca=cluster.ca_path, token=member_token) as client:
        refused = client.subscribe("members", [2, 7])
        with pytest.raises(logstrand.AccessDeniedError, match="may not read on log 7"):
            next(refused)
        items = client.subscribe("members", [2])
        # Log 2 holds other tests' records too: read on to this test's.
        seen = []
        for log, item in items:
            assert log == 2
            if isinstance(item, logstrand.Record):
                seen.append(item.payload)
                if item.payload == b"for the member":
                    break
        items.close()
        assert seen[-1] == b"for the member"

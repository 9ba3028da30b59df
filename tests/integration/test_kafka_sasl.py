"""The Kafka front of a secure cluster: SASL_SSL only.  librdkafka and
kafka-python authenticate with SCRAM-SHA-256/512 and PLAIN as logstrand
users (name and token), a wrong password is refused, a user without a
grant is refused per topic with nothing written, and a client that does
not authenticate gets nothing."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

import logstrand
from logstrand import Record
from logstrand.cli import main
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import AccessDeniedError
from logstrand.kafka import _protocol as proto
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow
TOPIC_LOGS = (700, 703)


@pytest.fixture(scope="module")
def secure(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    """A secure 3-node cluster serving Kafka; topic ``paid`` (logs 700-703);
    users made with ``logstrand users add``: ``bob`` (read and append on
    the topic), ``carol`` (no grant at all)."""
    with LocalCluster(
        tmp_path_factory.mktemp("ksasl"),
        nodes=3,
        secure=True,
        kafka=True,
        node_args=("--kafka-transactions",),
    ) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(*TOPIC_LOGS, LogAttributes(replication_factor=2), name="paid")
        for user in ("bob", "carol"):
            assert main(["users", "add", user, "--url", c.url, "--json"]) == 0
        yield c, {}


def _token(capsys: pytest.CaptureFixture[str], c: LocalCluster, user: str) -> str:
    """A fresh token for ``user`` (removed and added again through the CLI)."""
    assert main(["users", "remove", user, "--url", c.url]) == 0
    capsys.readouterr()
    assert main(["users", "add", user, "--url", c.url, "--json"]) == 0
    token: str = json.loads(capsys.readouterr().out)["token"]
    if user == "bob":
        grant = ["acl", "grant", user, "--logs", "700..703", "--ops", "read,append"]
        assert main([*grant, "--url", c.url]) == 0
        # Its consumers' groups: without a grant, librdkafka's close spends
        # its whole timeout (45 s) asking for a coordinator it is refused.
        grant = ["acl", "grant", user, "--group", "g-*", "--ops", "read"]
        assert main([*grant, "--url", c.url]) == 0
    capsys.readouterr()
    return token


def _paid_acl(
    principal: str,
    op: AclOperation = AclOperation.WRITE,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    """An ACL on topic ``paid`` by its literal name, for every host."""
    return AclBinding(
        ResourceType.TOPIC, "paid", ResourcePatternType.LITERAL, principal, "*", op, permission
    )


def _conf(c: LocalCluster, user: str, password: str, mechanism: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": c.kafka_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(c.directory / "tls" / "ca.pem"),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_a_user_produces_and_consumes_with_its_token(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str], mechanism: str
) -> None:
    c, _ = secure
    token = _token(capsys, c, "bob")
    p = Producer(_conf(c, "bob", token, mechanism))
    errors: list[Any] = []
    for i in range(10):
        p.produce("paid", value=b"v%d" % i, partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(60) == 0
    assert errors == [None] * 10
    consumer = Consumer({**_conf(c, "bob", token, mechanism), "group.id": f"g-{mechanism}"})
    consumer.assign([TopicPartition("paid", 0, 0)])
    got = []
    try:
        for _ in range(100):
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) >= 10:
                break
    finally:
        consumer.close()
    assert got[:10] == [b"v%d" % i for i in range(10)]


def test_debian_kcat_logs_in_with_plain(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The kcat of Debian 12 (librdkafka 2.0.2) takes SASL as absent unless
    ApiVersions lists SaslHandshake from v0, as Kafka does (it listed only
    v1: every mechanism failed).  Its SCRAM sends the nonce twice in its
    final message, which RFC 5802 and Kafka refuse: refused here too."""
    c, _ = secure
    token = _token(capsys, c, "bob")
    base = [
        "kcat", "-b", c.kafka_bootstrap, "-X", "security.protocol=SASL_SSL",
        "-X", f"ssl.ca.location={c.directory / 'tls' / 'ca.pem'}",
        "-X", "sasl.username=bob", "-X", f"sasl.password={token}", "-m", "5",
    ]  # fmt: skip
    out = subprocess.run(
        [*base, "-X", "sasl.mechanism=PLAIN", "-L"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert 'topic "paid" with 4 partitions' in out.stdout
    out = subprocess.run(
        [*base, "-X", "sasl.mechanism=SCRAM-SHA-256", "-L"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "SASL Handshake not supported" not in out.stderr


def test_a_wrong_password_is_refused(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    c, _ = secure
    _token(capsys, c, "bob")
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        seen: list[KafkaError] = []
        conf = {**_conf(c, "bob", "lst_not-the-token", mechanism), "error_cb": seen.append}
        admin = AdminClient(conf)
        with pytest.raises(KafkaException):
            # The login fails at once; list_topics then waits out its timeout.
            admin.list_topics(timeout=3)
        for _ in range(20):
            admin.poll(0.5)  # serves the error callback
            if seen:
                break
        assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen


def test_a_user_without_a_grant_is_refused_per_topic_and_nothing_is_written(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    c, _ = secure
    token = _token(capsys, c, "carol")
    with logstrand.connect(c.url, **c.client_options) as admin:
        before = admin.tail_lsn(TOPIC_LOGS[0] + 1)
    p = Producer({**_conf(c, "carol", token, "SCRAM-SHA-256"), "message.timeout.ms": 10000})
    errors: list[Any] = []
    p.produce("paid", value=b"no", partition=1, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert len(errors) == 1
    assert errors[0] is not None
    assert errors[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    with logstrand.connect(c.url, **c.client_options) as admin:
        assert admin.tail_lsn(TOPIC_LOGS[0] + 1) == before
        assert not [
            r for r in admin.read(TOPIC_LOGS[0] + 1) if isinstance(r, Record) and r.payload == b"no"
        ]
    # Nor does it see the topic.
    meta = AdminClient(_conf(c, "carol", token, "SCRAM-SHA-256")).list_topics(timeout=20)
    assert "paid" not in meta.topics or meta.topics["paid"].error is not None


def test_a_client_that_does_not_authenticate_gets_nothing(
    secure: tuple[LocalCluster, dict[str, str]],
) -> None:
    c, _ = secure
    host, port = c.kafka_bootstrap.split(",")[0].split(":")
    ctx = ssl.create_default_context(cafile=str(c.directory / "tls" / "ca.pem"))
    ctx.check_hostname = False
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        ctx.wrap_socket(raw) as tls,
    ):
        # ApiVersions is answered (it lists SASL), Metadata closes the connection.
        tls.sendall(
            proto.encode_request(
                18, 3, 1, {"client_software_name": "t", "client_software_version": "1"}
            )
        )
        size = struct.unpack(">i", tls.recv(4))[0]
        answer = b""
        while len(answer) < size:
            answer += tls.recv(size - len(answer))
        keys = {k["api_key"] for k in proto.decode_response(18, 3, answer)[1]["api_keys"]}
        assert {17, 36} <= keys
        tls.sendall(proto.encode_request(3, 12, 2, {"topics": None}))
        assert tls.recv(4) == b""
    # Plain TCP without TLS gets no Kafka answer either.
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(
            proto.encode_request(
                18, 3, 1, {"client_software_name": "t", "client_software_version": "1"}
            )
        )
        raw.settimeout(3)
        try:
            data = raw.recv(64)
        except (ConnectionResetError, TimeoutError):
            data = b""
        # Nothing, or a TLS alert: never a Kafka answer (its size, then correlation id 1).
        assert data[4:8] != struct.pack(">i", 1)


def test_acls_through_kafka_are_grants(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """CreateAcls/DescribeAcls/DeleteAcls from an AdminClient, as the admin
    user: a WRITE on the topic lets carol produce, its deletion stops her; a
    DENY is refused; carol herself may not make ACLs."""
    c, _ = secure
    token = _token(capsys, c, "carol")
    admin = AdminClient(_conf(c, "admin", c.admin_token or "", "SCRAM-SHA-256"))
    write = _paid_acl("User:carol")
    for f in admin.create_acls([write]).values():
        f.result(30)
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            "User:carol",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    assert [(b.name, b.operation) for b in described] == [("paid", AclOperation.WRITE)]
    time.sleep(1.0)  # another front's grants may be up to 0.5 s old
    errors: list[Any] = []
    p = Producer({**_conf(c, "carol", token, "SCRAM-SHA-256"), "message.timeout.ms": 10000})
    p.produce("paid", value=b"allowed", partition=2, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert errors == [None], [str(e) for e in errors]
    deny = _paid_acl("User:carol", AclOperation.READ, AclPermissionType.DENY)
    with pytest.raises(KafkaException, match="only ALLOW"):
        admin.create_acls([deny])[deny].result(30)
    carol_admin = AdminClient(_conf(c, "carol", token, "SCRAM-SHA-256"))
    with pytest.raises(KafkaException):
        carol_admin.create_acls([write])[write].result(30)
    gone = AclBindingFilter(
        ResourceType.TOPIC,
        "paid",
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for f in admin.delete_acls([gone]).values():
        assert len(f.result(30)) == 1
    time.sleep(6)  # the front reads grants again at most every 5 s
    errors.clear()
    # Refused either way librdkafka learns it: at once when a metadata
    # refresh has said so already, else in the delivery report.
    try:
        p.produce("paid", value=b"refused", partition=2, on_delivery=lambda e, m: errors.append(e))
    except KafkaException as exc:
        errors.append(exc.args[0])
    p.flush(30)
    assert errors[0] is not None
    assert errors[0].name() == "TOPIC_AUTHORIZATION_FAILED"


def test_an_acl_for_a_user_to_come_applies_once_it_is_made(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Kafka takes an ACL for any principal, a user with SCRAM credentials or
    not yet: CreateAcls for User:dave, then ``logstrand users add dave``,
    and dave produces.  A principal logstrand cannot have is refused."""
    c, _ = secure
    admin = AdminClient(_conf(c, "admin", c.admin_token or "", "SCRAM-SHA-256"))
    write = _paid_acl("User:dave")
    admin.create_acls([write])[write].result(30)
    bad = _paid_acl("Group:ops")
    with pytest.raises(KafkaException, match="User:NAME"):
        admin.create_acls([bad])[bad].result(30)
    capsys.readouterr()
    assert main(["users", "add", "dave", "--url", c.url, "--json"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    time.sleep(6)  # the front reads grants again at most every 5 s
    errors: list[Any] = []
    p = Producer({**_conf(c, "dave", token, "SCRAM-SHA-256"), "message.timeout.ms": 10000})
    p.produce("paid", value=b"dave's", partition=3, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert errors == [None], [str(e) for e in errors]


def _topic_acl(name: str, pattern: ResourcePatternType, op: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, name, pattern, "User:erin", "*", op, AclPermissionType.ALLOW
    )


def test_acls_on_a_topic_to_come_and_on_a_prefix_cover_it_as_it_grows(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Kafka takes an ACL on a topic that does not exist yet, and on a prefix
    (PREFIXED): a grant by name that holds once the topic is made, and for
    the partitions it gains later, even as a range of its own.  The node
    checks it too, for a native client with the same user's token; a topic
    the ACLs do not name stays refused.  Before, CreateAcls answered
    INVALID_REQUEST ("no topic 'soon'", "only literal topic names")."""
    from confluent_kafka.admin import NewPartitions, NewTopic

    c, _ = secure
    admin = AdminClient(_conf(c, "admin", c.admin_token or "", "SCRAM-SHA-256"))
    acls = [
        _topic_acl("soon", ResourcePatternType.LITERAL, AclOperation.WRITE),
        _topic_acl("so", ResourcePatternType.PREFIXED, AclOperation.READ),
        AclBinding(
            ResourceType.GROUP,
            "g-erin",
            ResourcePatternType.LITERAL,
            "User:erin",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    ]
    for f in admin.create_acls(acls).values():
        f.result(30)
    for f in admin.create_topics([NewTopic("soon", 2, 2), NewTopic("other", 1, 2)]).values():
        f.result(30)
    admin.create_partitions([NewPartitions("soon", 4)])["soon"].result(30)
    with open_epoch_store(c.url) as store:
        soon = [r for r in store.log_ranges() if r.name == "soon"]
        other = store.log_range_named("other").first
    assert len(soon) == 2  # "other" took the ids after the first part
    capsys.readouterr()
    assert main(["users", "add", "erin", "--url", c.url, "--json"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    time.sleep(6)  # the front reads grants again at most every 5 s

    errors: list[Any] = []

    def report(e: Any, m: Any) -> None:
        errors.append((m.topic(), m.partition(), e and e.name()))

    p = Producer({**_conf(c, "erin", token, "SCRAM-SHA-256"), "message.timeout.ms": 10000})
    for partition in (0, 3):
        p.produce("soon", value=b"erin's", partition=partition, on_delivery=report)
    p.produce("other", value=b"no", partition=0, on_delivery=report)
    p.flush(30)
    assert sorted(errors, key=str) == [
        ("other", 0, "TOPIC_AUTHORIZATION_FAILED"),
        ("soon", 0, None),
        ("soon", 3, None),
    ]
    consumer = Consumer({**_conf(c, "erin", token, "SCRAM-SHA-256"), "group.id": "g-erin"})
    try:
        consumer.assign([TopicPartition("soon", 3, 0)])
        m = None
        deadline = time.monotonic() + 30
        while m is None and time.monotonic() < deadline:
            m = consumer.poll(0.5)
    finally:
        consumer.close()
    assert m is not None
    assert (m.error(), m.value()) == (None, b"erin's")

    # The nodes check the same grants for a native client of the user.
    ca = str(c.directory / "tls" / "ca.pem")
    with logstrand.connect(c.url, ca=ca, token=token) as client:
        assert client.append(soon[1].last, b"native") > 0
        with pytest.raises(logstrand.AccessDeniedError):
            client.append(other, b"no")
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            None,
            ResourcePatternType.ANY,
            "User:erin",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    topics = [b for b in described if b.restype == ResourceType.TOPIC]
    assert sorted((b.name, b.resource_pattern_type, b.operation) for b in topics) == [
        ("so", ResourcePatternType.PREFIXED, AclOperation.READ),
        ("soon", ResourcePatternType.LITERAL, AclOperation.WRITE),
    ]


def test_a_transactional_id_is_used_only_by_a_user_granted_write_on_it(
    secure: tuple[LocalCluster, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Kafka's TRANSACTIONAL_ID resource: a producer of a transactional id
    needs WRITE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and it
    cannot fence another user's producer); an admin grants it with Kafka's
    own CreateAcls (PREFIXED), which DescribeAcls then lists, and the same
    grant lets the user's native transactions through the nodes' door."""
    c, _ = secure
    token = _token(capsys, c, "bob")
    conf = {**_conf(c, "bob", token, "SCRAM-SHA-256"), "transactional.id": "bob-app-1"}
    refused = Producer(conf)
    with pytest.raises(KafkaException) as err:
        refused.init_transactions(30)
    assert err.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # A native producer finds its coordinator as a group's member does: by
    # the positions log's sequencer (read on ``positions``).
    grant = ["acl", "grant", "bob", "--logs", "positions", "--ops", "read"]
    assert main([*grant, "--url", c.url]) == 0
    time.sleep(1.1)  # a node reads grants again after a refusal, at most every second
    with (
        logstrand.connect(c.url, ca=c.client_options["ca"], token=token) as native,
        pytest.raises(AccessDeniedError, match="--transactional-id"),
        native.transaction("bob-app-2") as tx,
    ):
        tx.append(TOPIC_LOGS[0], b"never")
    admin = AdminClient(_conf(c, "admin", c.admin_token or "", "SCRAM-SHA-256"))
    acl = AclBinding(
        ResourceType.TRANSACTIONAL_ID,
        "bob-",
        ResourcePatternType.PREFIXED,
        "User:bob",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    admin.create_acls([acl])[acl].result(30)
    time.sleep(0.6)  # other fronts count a new grant within RECHECK_S (0.5 s)
    listed = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TRANSACTIONAL_ID,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    assert [(a.name, a.resource_pattern_type, a.operation) for a in listed] == [
        ("bob-", ResourcePatternType.PREFIXED, AclOperation.WRITE)
    ]
    producer = Producer(conf)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("paid", value=b"in a transaction", partition=1)
    producer.commit_transaction(30)
    with logstrand.connect(c.url, ca=c.client_options["ca"], token=token) as native:
        # The grant went in through a Kafka front; the node that coordinates
        # the id reads grants again after a refusal at most every second, and
        # it refused this id above: the first try may still meet that.
        granted_by = time.monotonic() + 10
        while True:
            try:
                with native.transaction("bob-app-2") as tx:
                    tx.append(TOPIC_LOGS[0] + 1, b"native, granted")
                break
            except AccessDeniedError:
                if time.monotonic() > granted_by:
                    raise
                time.sleep(0.3)
        deadline = time.monotonic() + 20
        want = {b"in a transaction", b"native, granted"}
        while True:
            got = {
                r.payload
                for r in native.read(TOPIC_LOGS[0] + 1, isolation="committed")
                if isinstance(r, Record)
            }
            if want <= got or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert want <= got

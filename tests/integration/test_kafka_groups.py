"""Kafka consumer groups through the front, with real clients in processes
of their own (``kafka_member.py``): librdkafka (confluent-kafka),
kafka-python and aiokafka share topics, a member is killed and the others
take its partitions, a static member restarts without a rebalance, the
coordinator's node is killed and the group goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import logstrand
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.slow

MEMBER = Path(__file__).with_name("kafka_member.py")
#: The members' session timeout (kafka_member.py).
SESSION_S = 6.0
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("kgroups") / "c",
        nodes=3,
        kafka=True,
        node_args=("--group-session-ms", str(int(SESSION_S * 1000))),
    ) as c:
        yield c


def _topic(cluster: LocalCluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 2)])[name].result(30)


def _produce(cluster: LocalCluster, topic: str, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0


def _wait(what: str, ok: Callable[[], bool], timeout_s: float = 60.0) -> float:
    start = time.monotonic()
    while not ok():
        assert time.monotonic() - start < timeout_s, f"no {what} after {timeout_s} s"
        time.sleep(0.05)
    return time.monotonic() - start


class Members:
    """Member processes of one group, and what each wrote."""

    def __init__(self, tmp: Path, cluster: LocalCluster, group: str, topic: str) -> None:
        self.tmp, self.cluster, self.group, self.topic = tmp, cluster, group, topic
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Any] = {}
        self.files: dict[str, Path] = {}

    def start(self, name: str, client: str = "confluent", *extra: str) -> None:
        self.files.setdefault(name, self.tmp / f"{name}.events")
        argv = [sys.executable, str(MEMBER), client, self.cluster.kafka_bootstrap, self.group]
        argv += [self.topic, str(self.files[name]), *extra]
        log = self.logs[name] = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, name: str, *, kill: bool = False) -> None:
        proc = self.procs.pop(name)
        if kill:
            proc.kill()
        else:
            proc.terminate()
        proc.wait(30)
        self.logs.pop(name).close()

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def lines(self, name: str) -> list[str]:
        path = self.files[name]
        return path.read_text().splitlines() if path.exists() else []

    def assignment(self, name: str) -> set[int]:
        last = [ln for ln in self.lines(name) if ln.startswith("assigned")]
        if not last:
            return set()
        parts = last[-1].split(" ", 1)[1:] or [""]
        return {int(p.rsplit(":", 1)[1]) for p in parts[0].split(",") if p}

    def assignments(self, names: list[str] | None = None) -> list[set[int]]:
        return [self.assignment(n) for n in (names or list(self.procs))]

    def events(self, kind: str) -> Counter[tuple[int, int]]:
        out: Counter[tuple[int, int]] = Counter()
        for name in self.files:
            for ln in self.lines(name):
                word, *rest = ln.split()
                if word == kind:
                    out[(int(rest[0]), int(rest[1]))] += 1
        return out


def _shared(members: Members, names: list[str]) -> bool:
    """Every partition assigned, once, among ``names``."""
    got = members.assignments(names)
    return sum(len(a) for a in got) == PARTITIONS and set().union(*got) == set(range(PARTITIONS))


def _check_delivery(members: Members, per_partition: int) -> None:
    """Every message consumed at least once; none whose commit was recorded
    consumed twice."""
    got = members.events("got")
    committed = members.events("committed")
    want = {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}
    assert want <= set(got), sorted(want - set(got))[:10]
    # A message is consumed again only where the consumption before was not
    # committed (a killed member's last one, a rebalance's): so no message
    # is committed twice, and no member gets one again after committing it.
    twice = [m for m, n in committed.items() if n > 1]
    assert twice == [], f"committed twice, so consumed again after a commit: {twice[:10]}"
    for name in members.files:
        done: set[tuple[int, int]] = set()
        for line in members.lines(name):
            word, *rest = line.split()
            if word in ("got", "committed"):
                m = (int(rest[0]), int(rest[1]))
                assert not (word == "got" and m in done), f"{name} got {m} after committing it"
                if word == "committed":
                    done.add(m)


@pytest.fixture
def members(
    tmp_path: Path, cluster: LocalCluster, request: pytest.FixtureRequest
) -> Iterator[Members]:
    full = request.node.name
    name = f"{full[5:30]}-{zlib.crc32(full.encode()):08x}"
    _topic(cluster, name)
    m = Members(tmp_path, cluster, f"g-{name}", name)
    try:
        yield m
    finally:
        m.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_three_consumers_share_a_topic_and_take_over_from_a_killed_one(
    cluster: LocalCluster, members: Members, protocol: str
) -> None:
    """With the classic protocol (librdkafka assigns) and the consumer one
    (KIP-848: the coordinator assigns, session timeout from the node)."""
    _produce(cluster, members.topic, 100)
    for name in ("a", "b", "c"):
        members.start(name, "confluent", f"group.protocol={protocol}")
    _wait(
        "an assignment of 2 partitions each",
        lambda: (
            members.assignments() == [{0, 1, 2, 3, 4, 5} & a for a in members.assignments()]
            and all(len(a) == 2 for a in members.assignments())
        ),
    )
    _wait("the first messages", lambda: len(members.events("committed")) >= 60)
    if protocol == "consumer":
        _check_described(cluster, members)
    members.stop("c", kill=True)
    took = _wait("the survivors taking c's partitions", lambda: _shared(members, ["a", "b"]), 30)
    print(f"partitions of a killed member reassigned {took:.2f} s after the kill")
    assert took <= SESSION_S + 1.0
    _produce(cluster, members.topic, 50)
    _wait(
        "every message",
        lambda: (
            len(members.events("got")) >= 150 * PARTITIONS
            and set(members.events("got"))
            >= {(p, o) for p in range(PARTITIONS) for o in range(150)}
        ),
    )
    _check_delivery(members, 150)


def _check_described(cluster: LocalCluster, members: Members) -> None:
    """AdminClient's describe of a consumer-protocol group (librdkafka asks
    ConsumerGroupDescribe) shows its three members and what each owns."""
    from confluent_kafka import ConsumerGroupType

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    described = admin.describe_consumer_groups([members.group])[members.group].result(30)
    assert described.type == ConsumerGroupType.CONSUMER
    assert len(described.members) == 3
    owned = sorted(
        (tp.topic, tp.partition) for m in described.members for tp in m.assignment.topic_partitions
    )
    assert owned == [(members.topic, p) for p in range(PARTITIONS)]


def test_kafka_python_aiokafka_and_librdkafka_consumers_share_one_group(
    cluster: LocalCluster, members: Members
) -> None:
    members.start("rd", "confluent", "partition.assignment.strategy=roundrobin")
    members.start("kp", "kafka-python")
    members.start("aio", "aiokafka")
    _wait(
        "two partitions each",
        lambda: (
            all(len(a) == 2 for a in members.assignments())
            and _shared(members, ["rd", "kp", "aio"])
        ),
    )
    # The messages come once the group has settled.  Produced before, they
    # were read during the three joins' rebalances, and two full runs of
    # 2026-11-29 failed here: messages of partition 0 read again after
    # their commits.  The members' files of one show aiokafka, after two
    # rebalances in a row, reading 0:17-0:19 again after committing them
    # (it had asked for its committed offsets while its commit of 0:16 was
    # in flight).  At-least-once allows such a redelivery; _check_delivery
    # counts it as a double commit.  Commits across rebalances are the
    # subject of the kill test above.
    _produce(cluster, members.topic, 20)
    _wait(
        "every message",
        lambda: (
            set(members.events("got")) >= {(p, o) for p in range(PARTITIONS) for o in range(20)}
        ),
    )
    _check_delivery(members, 20)
    members.stop("kp")  # a clean leave: the others take its partitions at once
    took = _wait(
        "the others taking kafka-python's partitions", lambda: _shared(members, ["rd", "aio"]), 30
    )
    assert took < SESSION_S


def test_a_static_member_restarted_within_its_session_causes_no_rebalance(
    cluster: LocalCluster, members: Members
) -> None:
    _produce(cluster, members.topic, 10)
    # A session long enough for a restart on a busy machine (a process start
    # and a join): past it, the coordinator would rightly rebalance.
    long = "session.timeout.ms=30000"
    members.start("s1", "confluent", "group.instance.id=s1", long)
    # s1 first, so that it leads: a leader that comes back with a JoinGroup
    # older than v9 (librdkafka's) cannot be told to skip the assignment, and
    # the group rebalances, as with Kafka.
    _wait("s1 alone with every partition", lambda: len(members.assignment("s1")) == PARTITIONS)
    members.start("s2", "confluent", "group.instance.id=s2", long)
    _wait("two members sharing the topic", lambda: all(len(a) == 3 for a in members.assignments()))
    before_s1 = members.lines("s1")
    kept = members.assignment("s2")
    members.stop("s2")  # a static member leaves no LeaveGroup behind
    members.start("s2", "confluent", "group.instance.id=s2", long)
    _wait(
        "s2 back with its partitions",
        lambda: (
            len([ln for ln in members.lines("s2") if ln.startswith("assigned")]) >= 2
            and members.assignment("s2") == kept
        ),
        30,
    )
    time.sleep(SESSION_S / 2)
    # s1 was never asked to give up or take partitions.
    assert [ln for ln in members.lines("s1") if ln.startswith("assigned")] == [
        ln for ln in before_s1 if ln.startswith("assigned")
    ]


def test_committed_offsets_are_what_the_admin_client_lists(
    cluster: LocalCluster, members: Members
) -> None:
    _produce(cluster, members.topic, 30)
    members.start("a")
    _wait("every message", lambda: len(members.events("committed")) >= 30 * PARTITIONS)
    # logstrand groups describe names the member each log is assigned to ...
    rows = _describe(cluster, members.group)
    assert len({r["member"] for r in rows}) == 1
    assert None not in {r["member"] for r in rows}
    members.close()
    _produce(cluster, members.topic, 5)  # 5 more each, not consumed
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    request = ConsumerGroupTopicPartitions(members.group)
    listed = admin.list_consumer_group_offsets([request])[members.group].result(30)
    offsets = {tp.partition: tp.offset for tp in listed.topic_partitions}
    assert offsets == dict.fromkeys(range(PARTITIONS), 30)
    # ... and agrees with the admin client, counting the lag in offsets from
    # the log end offset (35 each).
    rows = _describe(cluster, members.group)
    with logstrand.connect(cluster.url) as client:
        first = client.log_of(members.topic)
    assert {r["log_id"] - first: r["offset"] for r in rows} == offsets
    assert {(r["end_offset"], r["lag_offsets"]) for r in rows} == {(35, 5)}
    assert {r["member"] for r in rows} == {None}
    groups = admin.list_consumer_groups().result(30)
    assert members.group in {g.group_id for g in groups.valid}
    described = admin.describe_consumer_groups([members.group])[members.group].result(30)
    assert described.members == []
    # An empty group can be deleted; its offsets go with it.
    admin.delete_consumer_groups([members.group])[members.group].result(30)
    listed = admin.list_consumer_group_offsets([request])[members.group].result(30)
    assert {tp.offset for tp in listed.topic_partitions} <= {-1001}


def test_offsets_committed_by_a_group_are_where_the_next_member_starts(
    cluster: LocalCluster, members: Members
) -> None:
    _produce(cluster, members.topic, 10)
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    # Offsets set from outside (kafka-consumer-groups --reset-offsets does this).
    parts = [TopicPartition(members.topic, p, 7) for p in range(PARTITIONS)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(members.group, parts)])[
        members.group
    ].result(30)
    members.start("a")
    _wait("the messages after offset 7", lambda: len(members.events("committed")) >= 3 * PARTITIONS)
    assert {o for _, o in members.events("got")} == {7, 8, 9}


def _describe(cluster: LocalCluster, group: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "logstrand",
            "groups",
            "describe",
            group,
            "--json",
            "--url",
            cluster.url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def _coordinator(cluster: LocalCluster, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30).coordinator.id


def test_the_group_goes_on_when_its_coordinator_s_node_is_killed(
    cluster: LocalCluster, members: Members
) -> None:
    """Last in this module: it kills a node (and starts it again)."""
    _produce(cluster, members.topic, 20)
    members.start("a")
    members.start("b")
    _wait("two members sharing the topic", lambda: _shared(members, ["a", "b"]))
    _wait("the first messages", lambda: len(members.events("committed")) >= 20 * PARTITIONS)
    coordinator = _coordinator(cluster, members.group)
    cluster.kill_node(coordinator)
    try:
        _produce(cluster, members.topic, 20)  # offsets 20-39 of each partition
        want = {(p, o) for p in range(PARTITIONS) for o in range(40)}
        _wait(
            "every message, with the coordinator moved",
            lambda: set(members.events("got")) >= want,
            90,
        )
        assert _coordinator(cluster, members.group) != coordinator
        # The same members, still sharing (no one was dropped for good).
        assert _shared(members, ["a", "b"])
        _check_delivery(members, 40)
    finally:
        members.close()
        cluster.start_node(coordinator)

"""Kafka transactions through confluent-kafka's transactional producer,
against real node processes serving ``--kafka-transactions`` (issue 58):
the coordinator, fencing, timeouts, and positions committed with a
transaction (send_offsets_to_transaction) or not at all."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from logstrand import Record
from logstrand.client import connect
from logstrand.epochstore import open_epoch_store
from logstrand.testing import LocalCluster

from .kafka_raw import KafkaPeer

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("kafka-txn") / "c",
        nodes=3,
        kafka=True,
        node_args=(
            "--compaction-interval",
            "0",
            "--kafka-transactions",
            "--kafka-max-transaction-timeout",
            "60s",
        ),
    ) as c:
        admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
        topics = [NewTopic(t, num_partitions=2) for t in ("tx-in", "tx-out", "tx-other")]
        topics += [NewTopic(t, num_partitions=1) for t in ("tx-rc", "tx-rs", "tx-z")]
        for future in admin.create_topics(topics).values():
            future.result(30)
        yield c


def _producer(cluster: LocalCluster, txn_id: str, **extra: Any) -> Producer:
    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": txn_id, **extra}
    )
    producer.init_transactions(30)
    return producer


def _committed(
    cluster: LocalCluster,
    group: str,
    topic: str,
    partitions: int = 2,
    isolation: str = "read_committed",
) -> list[int]:
    """The group's committed offsets of ``topic``'s partitions (-1001: none).
    A read_committed consumer (librdkafka's default) asks for stable ones:
    while a transaction holds a position it is told to ask again (KIP-447);
    a read_uncommitted one gets what is committed now."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "isolation.level": isolation,
        }
    )
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        return [tp.offset for tp in consumer.committed(wanted, timeout=30)]
    finally:
        consumer.close()


def _metadata(group: str) -> Any:
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def _cli(cluster: LocalCluster, *args: str, code: int = 0) -> str:
    """``logstrand ARGS --url URL``: its stdout (stderr when ``code`` is not 0)."""
    done = subprocess.run(
        [sys.executable, "-m", "logstrand", *args, "--url", cluster.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, (args, done.stdout, done.stderr)
    return done.stdout if code == 0 else done.stderr


def _offset_fetch(
    cluster: LocalCluster, group: str, topic: str, partitions: list[int], **extra: Any
) -> list[tuple[int, int, int]]:
    """OffsetFetch v7 of the group's coordinator: (partition, error, offset)."""
    with KafkaPeer(cluster.kafka_bootstrap.split(",")[0]) as peer:
        found = peer.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
    assert found is not None
    [where] = found["coordinators"]
    with KafkaPeer(f"{where['host']}:{where['port']}") as peer:
        body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}]}
        answer = peer.request(9, 7, {**body, **extra})
    assert answer is not None
    [t] = answer["topics"]
    return [(p["partition_index"], p["error_code"], p["committed_offset"]) for p in t["partitions"]]


def _log_of(cluster: LocalCluster, topic: str) -> int:
    with open_epoch_store(cluster.url) as store:
        return store.log_range_named(topic).first


def _coordinator(cluster: LocalCluster, txn_id: str) -> int:
    """The broker FindCoordinator(key_type=1) names for ``txn_id``."""
    with KafkaPeer(cluster.kafka_bootstrap.split(",")[0]) as peer:
        answer = peer.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
    assert answer is not None
    [found] = answer["coordinators"]
    assert found["error_code"] == 0, found
    return int(found["node_id"])


def test_a_transaction_commits_its_records_and_its_positions(cluster: LocalCluster) -> None:
    producer = _producer(cluster, "tx-commit")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("tx-out", value=f"v{i}".encode(), partition=i % 2)
    producer.produce("tx-other", value=b"elsewhere", partition=0)
    offsets = [TopicPartition("tx-in", 0, 7), TopicPartition("tx-in", 1, 3)]
    producer.send_offsets_to_transaction(offsets, _metadata("g-commit"), 30)
    # Not committed until the transaction is; the CLI shows what it holds.
    assert _committed(cluster, "g-commit", "tx-in", isolation="read_uncommitted") == [
        -1001,
        -1001,
    ]
    [listed] = json.loads(_cli(cluster, "transactions", "list", "--open", "--json"))
    assert (listed["id"], listed["state"], listed["groups"]) == (
        "tx-commit",
        "Ongoing",
        ["g-commit"],
    )
    assert len(listed["logs"]) == 4  # two partitions, one more topic, the positions log
    # KIP-447: asked for stable offsets, the group's coordinator says the
    # transaction holds them (and librdkafka's read_committed consumers ask
    # again until it ends).
    unstable = _offset_fetch(cluster, "g-commit", "tx-in", [0, 1], require_stable=True)
    assert unstable == [(0, 88, -1), (1, 88, -1)]
    assert _offset_fetch(cluster, "g-commit", "tx-in", [0, 1]) == [(0, 0, -1), (1, 0, -1)]
    held = json.loads(_cli(cluster, "transactions", "describe", "tx-commit", "--json"))["held"]
    assert sorted(offset for _log, _lsn, offset, _md in held["g-commit"]) == [3, 7]
    producer.commit_transaction(30)
    assert _committed(cluster, "g-commit", "tx-in") == [7, 3]
    # The end is written just after the answer (the markers are in).
    deadline = time.monotonic() + 10
    while True:
        shown = json.loads(_cli(cluster, "transactions", "describe", "tx-commit", "--json"))
        if shown["state"] == "CompleteCommit" or time.monotonic() > deadline:
            break
    assert (shown["state"], shown["held"]) == ("CompleteCommit", {})
    assert "no transactional id" in _cli(cluster, "transactions", "describe", "nope", code=1)
    # A second transaction of the same producer goes on from there.
    producer.begin_transaction()
    producer.produce("tx-out", value=b"again", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("tx-in", 0, 9)], _metadata("g-commit"), 30)
    producer.commit_transaction(30)
    assert _committed(cluster, "g-commit", "tx-in") == [9, 3]
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "reader",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition("tx-out", 0, 0), TopicPartition("tx-out", 1, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 11 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                values.append(m.value())
        assert sorted(values) == sorted([f"v{i}".encode() for i in range(10)] + [b"again"])
    finally:
        consumer.close()


def test_an_aborted_transaction_commits_no_positions(cluster: LocalCluster) -> None:
    producer = _producer(cluster, "tx-abort")
    producer.begin_transaction()
    producer.produce("tx-out", value=b"gone", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition("tx-in", 0, 5), TopicPartition("tx-in", 1, 6)], _metadata("g-abort"), 30
    )
    producer.abort_transaction(30)
    assert _committed(cluster, "g-abort", "tx-in") == [-1001, -1001]
    # The producer goes on: its next transaction commits.
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("tx-in", 1, 2)], _metadata("g-abort"), 30)
    producer.commit_transaction(30)
    assert _committed(cluster, "g-abort", "tx-in") == [-1001, 2]


def test_a_new_producer_of_the_id_fences_the_old_one(cluster: LocalCluster) -> None:
    """Its open transaction is aborted (its positions never committed) and
    the old producer's next step fails as fenced, for good."""
    old = _producer(cluster, "tx-fence")
    old.begin_transaction()
    old.produce("tx-out", value=b"zombie", partition=1)
    old.send_offsets_to_transaction([TopicPartition("tx-in", 0, 4)], _metadata("g-fence"), 30)
    new = _producer(cluster, "tx-fence")
    assert _committed(cluster, "g-fence", "tx-in") == [-1001, -1001]
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(30)
    error = fenced.value.args[0]
    assert error.fatal() or error.code() == KafkaError._FENCED, error
    new.begin_transaction()
    new.send_offsets_to_transaction([TopicPartition("tx-in", 0, 8)], _metadata("g-fence"), 30)
    new.commit_transaction(30)
    assert _committed(cluster, "g-fence", "tx-in") == [8, -1001]


def test_a_silent_producers_transaction_is_aborted_after_its_timeout(
    cluster: LocalCluster,
) -> None:
    """A producer that goes silent with a transaction open: the coordinator
    aborts it after transaction.timeout.ms, and fences it."""
    silent = _producer(cluster, "tx-silent", **{"transaction.timeout.ms": 2000})
    silent.begin_transaction()
    silent.send_offsets_to_transaction([TopicPartition("tx-in", 1, 5)], _metadata("g-silent"), 30)
    node = _coordinator(cluster, "tx-silent")
    assert cluster.metric(node, "logstrand_transactions_open") == 1
    time.sleep(4)
    assert cluster.metric(node, "logstrand_transactions_open") == 0
    with pytest.raises(KafkaException):
        silent.commit_transaction(30)
    assert _committed(cluster, "g-silent", "tx-in") == [-1001, -1001]
    # A producer that asks for more than the nodes allow is refused.
    greedy = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "transactional.id": "tx-greedy",
            "transaction.timeout.ms": 120_000,
        }
    )
    with pytest.raises(KafkaException) as refused:
        greedy.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_a_transactions_state_survives_its_coordinators_node(cluster: LocalCluster) -> None:
    """The coordinator's node stops between send_offsets_to_transaction and
    commit: the node that sequences the positions log next reads the id's
    state back, and the commit completes there."""
    producer = _producer(cluster, "tx-failover")
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("tx-in", 0, 11)], _metadata("g-fo"), 30)
    node = _coordinator(cluster, "tx-failover")
    cluster.kill_node(node)
    try:
        producer.commit_transaction(60)
        assert _committed(cluster, "g-fo", "tx-in") == [11, -1001]
    finally:
        cluster.start_node(node)


def _consume(cluster: LocalCluster, topic: str, isolation: str, within_s: float) -> list[bytes]:
    """Every value of partition 0 of ``topic`` a consumer with ``isolation``
    gets within ``within_s`` (it stops early after 2 s with nothing new)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": f"rc-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + within_s
        quiet_until = time.monotonic() + 2.0
        while time.monotonic() < min(deadline, quiet_until):
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                values.append(m.value())
                quiet_until = time.monotonic() + 2.0
        return values
    finally:
        consumer.close()


def test_read_committed_stops_at_an_open_transaction_and_drops_aborted_ones(
    cluster: LocalCluster,
) -> None:
    """An open transaction hides itself and everything after it from
    read_committed consumers (the last stable offset) while read_uncommitted
    ones see it all; once it ends, committed records show and aborted ones
    never do."""
    plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
    plain.produce("tx-rc", value=b"before", partition=0)
    assert plain.flush(30) == 0
    producer = _producer(cluster, "tx-rc")
    producer.begin_transaction()
    for i in range(3):
        producer.produce("tx-rc", value=f"open{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    plain.produce("tx-rc", value=b"after", partition=0)  # behind the open one
    assert plain.flush(30) == 0
    assert _consume(cluster, "tx-rc", "read_committed", 10) == [b"before"]
    # The open transaction holds the LSO back by its three records and one
    # after it, on the node that answered (the partition's leader).
    log_id = _log_of(cluster, "tx-rc")
    lags = [
        cluster.metric(n, f'logstrand_kafka_lso_lag_lsns{{log="{log_id}"}}', default=0)
        for n in cluster.nodes
    ]
    assert max(lags) == 4, lags
    everything = [b"before", b"open0", b"open1", b"open2", b"after"]
    assert _consume(cluster, "tx-rc", "read_uncommitted", 10) == everything
    producer.abort_transaction(30)
    assert _consume(cluster, "tx-rc", "read_committed", 10) == [b"before", b"after"]
    producer.begin_transaction()
    producer.produce("tx-rc", value=b"kept", partition=0)
    producer.commit_transaction(30)
    assert _consume(cluster, "tx-rc", "read_committed", 10) == [b"before", b"after", b"kept"]
    # A native reader gets the records, never the markers.
    with connect(cluster.url) as client:
        values = [r.payload for r in client.read(log_id) if isinstance(r, Record)]
    assert values == [*everything, b"kept"]


def test_a_new_producer_of_the_id_writes_from_sequence_zero_again(
    cluster: LocalCluster,
) -> None:
    """A producer of a transactional id that starts again keeps its producer
    id at a new epoch, and numbers its batches from 0 again: they are new
    records, not retries of the old producer's (Kafka keys sequences by
    producer id and epoch)."""
    first = _producer(cluster, "tx-restart")
    first.begin_transaction()
    first.produce("tx-rs", value=b"one", partition=0)
    first.commit_transaction(30)
    first = None  # gone; a new instance takes the id over
    second = _producer(cluster, "tx-restart")
    second.begin_transaction()
    second.produce("tx-rs", value=b"two", partition=0)
    second.commit_transaction(30)
    assert _consume(cluster, "tx-rs", "read_committed", 10) == [b"one", b"two"]


def test_a_fenced_producers_late_records_are_refused_by_the_log(cluster: LocalCluster) -> None:
    """A zombie: a producer that a newer producer of its transactional id
    fenced goes on producing to a partition of its old transaction.  The
    abort marker the fencing wrote fences its epoch in that log, so its
    late record is refused (INVALID_PRODUCER_EPOCH) instead of being taken
    into the new producer's next commit."""
    old = _producer(cluster, "tx-zombie")
    old.begin_transaction()
    old.produce("tx-z", value=b"z1", partition=0)
    assert old.flush(30) == 0
    new = _producer(cluster, "tx-zombie")  # fences the old one
    old.produce("tx-z", value=b"z2", partition=0)
    with pytest.raises(KafkaException) as refused:
        old.flush(30)
    error = refused.value.args[0]
    assert error.code() == KafkaError._FENCED, error  # librdkafka's name for it
    assert "old epoch" in error.str(), error
    new.begin_transaction()
    new.produce("tx-z", value=b"b1", partition=0)
    new.commit_transaction(30)
    assert _consume(cluster, "tx-z", "read_committed", 10) == [b"b1"]
    assert _consume(cluster, "tx-z", "read_uncommitted", 10) == [b"z1", b"b1"]


def _coordinator_peer(cluster: LocalCluster, key: str, key_type: int) -> KafkaPeer:
    with KafkaPeer(cluster.kafka_bootstrap.split(",")[0]) as peer:
        found = peer.request(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
    assert found is not None
    [where] = found["coordinators"]
    return KafkaPeer(f"{where['host']}:{where['port']}")


def test_older_clients_hear_fencing_and_commit_offsets_as_they_expect(
    cluster: LocalCluster,
) -> None:
    """Found by aiokafka's transaction tests: a client of AddPartitionsToTxn
    before v2 knows fencing as INVALID_PRODUCER_EPOCH (47), not
    PRODUCER_FENCED (90, which it took for an unknown error); and a
    TxnOffsetCommit before v3 names no member, so a group with members
    takes it (it was UNKNOWN_MEMBER_ID)."""
    new = _producer(cluster, "tx-old-client")
    with _coordinator_peer(cluster, "tx-old-client", 1) as peer:
        got = peer.request(
            22, 1, {"transactional_id": "tx-old-client", "transaction_timeout_ms": 60_000}
        )
        assert got is not None
        assert got["error_code"] == 0
        pid, epoch = got["producer_id"], got["producer_epoch"]  # new is fenced now
        for version, fenced in ((1, 47), (3, 90)):
            body = {
                "v3_and_below_transactional_id": "tx-old-client",
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch - 1,
                "v3_and_below_topics": [{"name": "tx-out", "partitions": [0]}],
            }
            answer = peer.request(24, version, body)
            assert answer is not None
            [t] = answer["results_by_topic_v3_and_below"]
            assert t["results_by_partition"][0]["partition_error_code"] == fenced, version
    del new
    member = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "g-old"})
    try:
        member.subscribe(["tx-in"])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        body = {
            "transactional_id": "tx-old-client",
            "group_id": "g-old",
            "producer_id": pid,
            "producer_epoch": epoch,
            "topics": [
                {
                    "name": "tx-in",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}
                    ],
                }
            ],
        }
        with _coordinator_peer(cluster, "g-old", 0) as peer:
            answer = peer.request(28, 2, body)
        assert answer is not None
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    finally:
        member.close()


def test_bad_transaction_requests_get_their_errors_and_change_nothing(
    cluster: LocalCluster,
) -> None:
    """Each transaction API, asked what makes no sense, answers Kafka's error
    for it, and the id's state stays as it was."""
    with _coordinator_peer(cluster, "tx-bad", 1) as peer:

        def init(txn_id: str, timeout_ms: int = 60_000) -> dict[str, Any]:
            body = {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms}
            got = peer.request(22, 1, body)
            assert got is not None
            return got

        assert init("has space")["error_code"] == 42  # INVALID_REQUEST
        assert init("tx-bad", 0)["error_code"] == 50  # INVALID_TRANSACTION_TIMEOUT
        assert init("tx-bad", 10**9)["error_code"] == 50
        good = init("tx-bad")
        pid, epoch = good["producer_id"], good["producer_epoch"]
        end = {"transactional_id": "tx-bad", "producer_id": pid, "producer_epoch": epoch}
        no_txn = peer.request(26, 1, {**end, "committed": True})
        assert no_txn is not None
        assert no_txn["error_code"] == 48  # INVALID_TXN_STATE: nothing is open
        wrong = peer.request(26, 1, {**end, "producer_id": pid + 1, "committed": True})
        assert wrong is not None
        assert wrong["error_code"] == 49  # INVALID_PRODUCER_ID_MAPPING
        ahead = peer.request(26, 1, {**end, "producer_epoch": epoch + 1, "committed": False})
        assert ahead is not None
        assert ahead["error_code"] == 47  # INVALID_PRODUCER_EPOCH
        add = {
            "v3_and_below_transactional_id": "tx-bad",
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [
                {"name": "tx-out", "partitions": [0]},
                {"name": "no-such-topic", "partitions": [0]},
            ],
        }
        added = peer.request(24, 3, add)
        assert added is not None
        codes = {
            t["name"]: [p["partition_error_code"] for p in t["results_by_partition"]]
            for t in added["results_by_topic_v3_and_below"]
        }
        assert codes == {"tx-out": [55], "no-such-topic": [3]}  # OPERATION_NOT_ATTEMPTED
        # Nothing was opened by the refused request.
        again = peer.request(26, 1, {**end, "committed": False})
        assert again is not None
        assert again["error_code"] == 48
    state = json.loads(_cli(cluster, "transactions", "describe", "tx-bad", "--json"))
    assert (state["state"], state["logs"]) == ("Empty", [])
    # The other nodes are not its coordinator, and say so.
    with KafkaPeer(cluster.kafka_bootstrap.split(",")[0]) as peer:
        found = peer.request(10, 4, {"key_type": 1, "coordinator_keys": ["tx-bad"]})
    assert found is not None
    [where] = found["coordinators"]
    coordinator = f"{where['host']}:{where['port']}"
    others = [a for a in cluster.kafka_bootstrap.split(",") if a != coordinator]
    assert len(others) == 2
    for address in others:
        with KafkaPeer(address) as peer:
            got = peer.request(26, 1, {**end, "committed": True})
        assert got is not None
        assert got["error_code"] == 16, address  # NOT_COORDINATOR

"""What Kafka's own clients rely on of a broker (issue 57), each through a
real client against real node processes serving the Kafka front."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

import logstrand
from logstrand.cli import main
from logstrand.epochstore import open_epoch_store
from logstrand.kafka._records import decode_batches
from logstrand.testing import LocalCluster
from logstrand.types import lsn_epoch

from .kafka_raw import KafkaPeer, wait_for_partitions

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("kafka-clients") / "c",
        nodes=3,
        kafka=True,
        node_args=(
            "--compaction-interval",
            "0",
            "--kafka-auto-create",
            "--kafka-num-partitions",
            "3",
        ),
    ) as c:
        yield c


def _create(cluster: LocalCluster, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    for future in admin.create_topics(list(topics)).values():
        future.result(30)


def _log_of(cluster: LocalCluster, topic: str) -> int:
    with open_epoch_store(cluster.url) as store:
        return store.log_range_named(topic).first


def _produce(cluster: LocalCluster, topic: str, records: list[tuple[Any, Any]]) -> list[Any]:
    """Produce (key, value) pairs to partition 0; each delivery report's error."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(
            topic, key=key, value=value, partition=0, on_delivery=lambda e, _m: errors.append(e)
        )
    assert producer.flush(30) == 0
    return errors


def _messages(consumer: Consumer, count: int, within_s: float = 30.0) -> Iterator[Message]:
    """Up to ``count`` messages ``consumer`` polls within ``within_s``, each
    checked to carry no error."""
    got = 0
    deadline = time.monotonic() + within_s
    while got < count and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got += 1
        yield m


def _consume(cluster: LocalCluster, topic: str, count: int) -> list[tuple[int, Any, Any]]:
    """(offset, key, value) of ``count`` messages of partition 0, from the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": f"read-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        return [(m.offset(), m.key(), m.value()) for m in _messages(consumer, count)]
    finally:
        consumer.close()


def test_a_null_value_is_stored_and_on_a_compacted_topic_deletes_its_key(
    cluster: LocalCluster,
) -> None:
    """Kafka stores a record whose value is null; on a compacted topic it is
    the tombstone that deletes its key.  A producer that did not check its
    delivery reports lost such records silently (INVALID_RECORD)."""
    _create(
        cluster,
        NewTopic("nulls", 1, 2),
        NewTopic("nulls-compacted", 1, 2, config={"cleanup.policy": "compact"}),
    )
    plain = [(b"a", None), (None, None), (b"b", b"v")]
    assert _produce(cluster, "nulls", plain) == [None, None, None]
    assert _consume(cluster, "nulls", 3) == [(0, b"a", None), (1, None, None), (2, b"b", b"v")]
    with logstrand.connect(cluster.url) as client:
        got = [(r.key, r.payload) for r in client.read(_log_of(cluster, "nulls"))]
    assert got == plain  # a native reader sees payload None

    updates = [(b"k", b"1"), (b"j", b"2"), (b"k", None)]
    assert _produce(cluster, "nulls-compacted", updates) == [None, None, None]
    log = _log_of(cluster, "nulls-compacted")
    with logstrand.connect(cluster.url) as client:
        stats = client.compact(log)
        after = [(r.key, r.payload) for r in client.read(log)]
    # k's value is gone and its tombstone stays (for delete.retention.ms);
    # the consumer reads around the offset compaction removed.
    assert stats["records_removed"] == 1
    assert after == [(b"j", b"2"), (b"k", None)]
    assert _consume(cluster, "nulls-compacted", 2) == [(1, b"j", b"2"), (2, b"k", None)]


# kafka-python 3 reads its own schemas with importlib.resources.read_text.
@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_a_success_carries_a_null_error_message(cluster: LocalCluster) -> None:
    """Kafka answers "the error message, or null if there was no error";
    kafka-python's admin client returns the response as it came."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        made = admin.create_topics({"null-message": {"num_partitions": 2, "replication_factor": 2}})
        (row,) = made["topics"]
        assert (row["name"], row["error_code"], row["error_message"]) == ("null-message", 0, None)
        refused = admin.create_topics({"null-message": {"num_partitions": 2}}, raise_errors=False)
        (again,) = refused["topics"]
        assert again["error_code"] == 36  # TOPIC_ALREADY_EXISTS, with its message
        assert again["error_message"]
    finally:
        admin.close()


@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_a_fetch_stops_before_a_batch_over_the_partition_limit(cluster: LocalCluster) -> None:
    """max.partition.fetch.bytes 4,000: Kafka answers with batches that fit,
    and a first batch however big (so a consumer gets on), never one past
    the limit behind it.  Records appended natively in one batch go out cut
    to the limit too."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    _create(cluster, NewTopic("fetch-limit", 1, 2))
    assert _produce(cluster, "fetch-limit", [(None, b"s" * 10)]) == [None]
    assert _produce(cluster, "fetch-limit", [(None, b"B" * 50_000)]) == [None]
    log = _log_of(cluster, "fetch-limit")
    with logstrand.connect(cluster.url) as client:
        client.append_batch(log, [b"m%04d" % i + b"." * 95 for i in range(200)])
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap,
        max_partition_fetch_bytes=4000,
        enable_auto_commit=False,
    )
    try:
        tp = KTopicPartition("fetch-limit", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        answers: list[list[int]] = []
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 202 and time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=1000, max_records=1000).get(tp, [])
            if got:
                answers.append([len(r.value) for r in got])
                seen += len(got)
    finally:
        consumer.close()
    assert seen == 202
    # The 10 B record alone; the 50,000 B one alone (first of its answer);
    # then the 100 B records, about 30 an answer, never more than fit.
    assert answers[0] == [10]
    assert answers[1] == [50_000]
    assert all(sizes == [100] * len(sizes) for sizes in answers[2:])
    assert sum(len(a) for a in answers[2:]) == 200
    assert max(len(a) for a in answers[2:]) * 100 <= 4000


def test_a_consumer_protocol_client_commits_for_partitions_it_assigned_itself(
    cluster: LocalCluster,
) -> None:
    """KIP-848's consumer (group.protocol=consumer) with assign(): it joins
    no group, and its commits are taken as Kafka takes any commit to a
    group without members."""
    _create(cluster, NewTopic("self-assigned", 2, 2))
    assert _produce(cluster, "self-assigned", [(None, b"x%d" % i) for i in range(5)]) == [None] * 5
    config = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "group.id": "assigner",
        "group.protocol": "consumer",
        "enable.auto.commit": False,
    }
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition("self-assigned", 0, 0)])
        got = list(_messages(consumer, 5))
        assert len(got) == 5
        done = consumer.commit(message=got[2], asynchronous=False)
        assert [(p.partition, p.offset, p.error) for p in done] == [(0, 3, None)]
    finally:
        consumer.close()
    again = Consumer(config)
    try:
        (committed,) = again.committed([TopicPartition("self-assigned", 0)], timeout=30)
        assert committed.offset == 3
    finally:
        again.close()


def _subscribed(config: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """The values a consumer of ``config`` subscribed to ``topic`` reads, up
    to ``count`` (committing as it goes), before it closes and leaves."""
    consumer = Consumer({**config, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for m in _messages(consumer, count, within_s=60):
            got.append(m.value())
            consumer.commit(message=m, asynchronous=False)
    finally:
        consumer.close()
    return got


def test_an_empty_group_changes_protocol_with_its_next_member(cluster: LocalCluster) -> None:
    """Consumers moving between group.protocol=classic and consumer, one
    restart after the other: the empty group is converted (as Kafka 4 does),
    and the next member goes on from the group's committed offsets."""
    _create(cluster, NewTopic("migrating", 1, 2))
    values = [b"v%d" % i for i in range(9)]
    assert _produce(cluster, "migrating", [(None, v) for v in values]) == [None] * 9
    base = {"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "migrating"}
    assert _subscribed({**base, "group.protocol": "classic"}, "migrating", 3) == values[:3]
    assert _subscribed({**base, "group.protocol": "consumer"}, "migrating", 3) == values[3:6]
    assert _subscribed({**base, "group.protocol": "classic"}, "migrating", 3) == values[6:]


def _owned(consumers: list[Consumer], within_s: float, want: Any) -> list[set[int]]:
    """Each consumer's partitions, polling all of them, once ``want`` holds
    of them (or at ``within_s``)."""
    deadline = time.monotonic() + within_s
    while True:
        for c in consumers:
            c.poll(0.1)
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        if want(owned) or time.monotonic() > deadline:
            return owned


def _group_type(cluster: LocalCluster, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30).type


def test_classic_and_consumer_protocol_members_share_a_group(cluster: LocalCluster) -> None:
    """Kafka 4's online upgrade: a consumer-protocol member joins a group a
    classic consumer is in; the group becomes a consumer group, the classic
    member stays with its own protocol, and the partitions are split
    between them, each record read once.  A classic consumer then joins the
    mixed group, and when the others leave the last one has them all, in a
    classic group again (Kafka's downgrade).
    Before, the two never shared: the newcomer got GROUP_ID_NOT_FOUND."""
    _create(cluster, NewTopic("mixed", 4, 2))
    base = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "group.id": "mixed",
        "auto.offset.reset": "earliest",
    }
    classic = Consumer({**base, "group.protocol": "classic", "session.timeout.ms": 10_000})
    modern = Consumer({**base, "group.protocol": "consumer"})
    late = Consumer({**base, "group.protocol": "classic", "session.timeout.ms": 10_000})
    try:
        classic.subscribe(["mixed"])
        assert _owned([classic], 30, lambda o: o == [{0, 1, 2, 3}]) == [{0, 1, 2, 3}]
        modern.subscribe(["mixed"])
        split = _owned([classic, modern], 60, lambda o: all(o) and o[0] | o[1] == {0, 1, 2, 3})
        assert all(split), split
        assert not split[0] & split[1]
        assert split[0] | split[1] == {0, 1, 2, 3}
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0})
        for i in range(40):
            producer.produce("mixed", value=b"m%d" % i, partition=i % 4)
        assert producer.flush(30) == 0
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            for c in (classic, modern):
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    got.append(m.value())
        assert sorted(got) == sorted(b"m%d" % i for i in range(40))

        late.subscribe(["mixed"])
        three = _owned([classic, modern, late], 60, lambda o: all(o) and sum(map(len, o)) == 4)
        assert all(three), three
        assert set().union(*three) == {0, 1, 2, 3}
        assert _group_type(cluster, "mixed") == ConsumerGroupType.CONSUMER
        classic.close()
        modern.close()
        # Only a classic member is left: the group is a classic one again.
        assert _owned([late], 60, lambda o: o == [{0, 1, 2, 3}]) == [{0, 1, 2, 3}]
        assert _group_type(cluster, "mixed") == ConsumerGroupType.CLASSIC
    finally:
        for c in (classic, modern, late):
            with contextlib.suppress(RuntimeError):
                c.close()


def test_a_transactional_producer_is_refused_at_once(cluster: LocalCluster) -> None:
    """Until transactions are served, a transactional producer learns so at
    once (what Kafka answers where an ACL denies the transactional id),
    instead of retrying COORDINATOR_NOT_AVAILABLE until its timeout."""
    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": "not-yet"}
    )
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    took = time.monotonic() - t0
    error = refused.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal()
    assert took < 10, took


# kafka-python 3 reads its own schemas with importlib.resources.read_text.
@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_a_topic_made_without_a_number_gets_num_partitions(cluster: LocalCluster) -> None:
    """Kafka's num.partitions (--kafka-num-partitions 3 here): for a topic a
    producer makes by naming it, and for CreateTopics with -1."""
    from kafka import KafkaAdminClient

    assert _produce(cluster, "named-only", [(None, b"x")]) == [None]
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        made = admin.create_topics({"no-number": {}})
        assert made["topics"][0]["error_code"] == 0
    finally:
        admin.close()
    listed = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics(timeout=30)
    assert len(listed.topics["named-only"].partitions) == 3
    assert len(listed.topics["no-number"].partitions) == 3


# kafka-python 3 reads its own schemas with importlib.resources.read_text.
@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_configs_of_a_broker_and_of_a_topic_as_kafka_describes_them(
    cluster: LocalCluster,
) -> None:
    """A BROKER resource has the node's settings; a topic's configs carry
    their type, documentation and synonyms (the topic's setting, then the
    broker-wide default it falls back to)."""
    from confluent_kafka.admin import ConfigResource
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource

    _create(cluster, NewTopic("configured", 1, 2, config={"retention.ms": "60000"}))
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([broker])[broker].result(30)
    assert entries["broker.id"].value == "1"
    assert entries["num.partitions"].value == "3"
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["advertised.listeners"].value.startswith("PLAINTEXT://127.0.0.1:")
    assert all(e.is_read_only for e in entries.values())

    topic = ConfigResource(ConfigResource.Type.TOPIC, "configured")
    configs = admin.describe_configs([topic], request_timeout=30)[topic].result(30)
    retention = configs["retention.ms"]
    assert (retention.value, retention.is_default) == ("60000", False)
    assert [(s.name, s.value) for s in retention.synonyms.values()] == [
        ("retention.ms", "60000"),
        ("log.retention.ms", "-1"),  # logstrand keeps records by default
    ]

    kadmin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        got = kadmin.describe_configs([KConfigResource("TOPIC", "configured")], config_filter="all")
    finally:
        kadmin.close()
    described = next(iter(next(iter(got.values())).values()))
    assert described["retention.ms"]["config_type"] == "LONG"
    assert described["cleanup.policy"]["config_type"] == "LIST"
    assert described["min.cleanable.dirty.ratio"]["config_type"] == "DOUBLE"
    assert described["retention.ms"]["documentation"]


def test_cleanup_policy_is_a_list_config(cluster: LocalCluster) -> None:
    """IncrementalAlterConfigs APPENDs to and SUBTRACTs from cleanup.policy,
    Kafka's list config, as confluent-kafka-python's suite does; a policy
    left empty is refused.  Before, both were INVALID_CONFIG."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    _create(cluster, NewTopic("policies", 1, 2))
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})

    def change(op: AlterConfigOpType, value: str) -> str:
        res = ConfigResource(
            ConfigResource.Type.TOPIC,
            "policies",
            incremental_configs=[ConfigEntry("cleanup.policy", value, incremental_operation=op)],
        )
        admin.incremental_alter_configs([res])[res].result(30)
        shown = ConfigResource(ConfigResource.Type.TOPIC, "policies")
        return str(admin.describe_configs([shown])[shown].result(30)["cleanup.policy"].value)

    assert change(AlterConfigOpType.APPEND, "compact") == "compact,delete"
    assert change(AlterConfigOpType.SUBTRACT, "delete") == "compact"
    with pytest.raises(KafkaException, match="no empty policy"):
        change(AlterConfigOpType.SUBTRACT, "compact")


def test_offsets_for_times_name_a_record_and_its_time(cluster: LocalCluster) -> None:
    """ListOffsets by time answers the first record at or after it with that
    record's timestamp, -1 past the last record, and MAX_TIMESTAMP (-3,
    KIP-734) the record with the largest timestamp."""
    from confluent_kafka.admin import OffsetSpec

    _create(cluster, NewTopic("timed", 1, 2))
    for i in range(3):
        assert _produce(cluster, "timed", [(None, b"t%d" % i)]) == [None]
        time.sleep(0.05)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "timed"})
    try:
        consumer.assign([TopicPartition("timed", 0, 0)])
        stamps = [m.timestamp()[1] for m in _messages(consumer, 3)]
        assert len(stamps) == 3
        assert stamps == sorted(stamps)
        # One time a call: librdkafka keeps one entry per partition.
        asked = [stamps[0] - 1000, stamps[1], stamps[2] + 60_000]
        found = [consumer.offsets_for_times([TopicPartition("timed", 0, t)], 30)[0] for t in asked]
    finally:
        consumer.close()
    # Before the first record: the first; at the second's time: the second
    # (or the first, were they stamped in the same millisecond); past the
    # last record: -1, as Kafka answers.
    assert [tp.offset for tp in found] == [0, stamps.index(stamps[1]), -1]
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    tp = TopicPartition("timed", 0)
    at = admin.list_offsets({tp: OffsetSpec.for_timestamp(stamps[1])})[tp].result(30)
    assert (at.offset, at.timestamp) == (stamps.index(stamps[1]), stamps[1])
    top = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(30)
    assert (top.offset, top.timestamp) == (2, stamps[2])


def test_a_search_by_time_goes_by_the_producers_create_times(cluster: LocalCluster) -> None:
    """A topic's timestamps are CreateTimes, and Kafka searches by them: a
    replay of a day-old history is found by its own times, not by when it
    was appended, a record a little out of order is still the first with
    its time, and MAX_TIMESTAMP names the record with the largest CreateTime
    even when it is not the last.  Before, the search went by append time:
    every time of that day answered offset 0."""
    from confluent_kafka.admin import OffsetSpec

    _create(cluster, NewTopic("replayed", 1, 2))
    day_ago = int(time.time() * 1000) - 86_400_000
    # Ten records a second apart, a day old; the one at offset 6 was retried
    # and came late (a time before offset 5's); offset 8 has a clock ahead.
    stamps = [day_ago + i * 1000 for i in range(10)]
    stamps[6] = day_ago + 4_500
    stamps[8] = day_ago + 60_000
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0})
    for i, ts in enumerate(stamps):
        producer.produce("replayed", value=b"r%d" % i, partition=0, timestamp=ts)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    tp = TopicPartition("replayed", 0)

    def search(t: int) -> tuple[int, int]:
        got = admin.list_offsets({tp: OffsetSpec.for_timestamp(t)})[tp].result(30)
        return got.offset, got.timestamp

    assert search(day_ago - 5) == (0, day_ago)
    assert search(day_ago + 3_000) == (3, day_ago + 3_000)
    assert search(day_ago + 3_001) == (4, day_ago + 4_000)
    assert search(day_ago + 4_200) == (5, day_ago + 5_000)  # 6's 4,500 comes after 5
    assert search(day_ago + 9_500) == (8, day_ago + 60_000)
    assert search(day_ago + 61_000) == (-1, -1)
    top = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(30)
    assert (top.offset, top.timestamp) == (8, day_ago + 60_000)


def test_a_broker_describes_only_itself(cluster: LocalCluster) -> None:
    """A BROKER resource goes to that broker (Kafka's admin clients send it
    there): another id, or a name that is no id, is INVALID_REQUEST naming
    what was expected; "" (the cluster-wide dynamic defaults) has none."""
    from .kafka_raw import KafkaPeer

    asked = [
        {"resource_type": 4, "resource_name": n, "configuration_keys": None}
        for n in ("2", "x", "", "1")
    ]
    with KafkaPeer(f"127.0.0.1:{cluster.kafka_ports[1]}") as peer:
        answer = peer.request(32, 4, {"resources": asked, "include_synonyms": False})
    assert answer is not None
    rows = {r["resource_name"]: r for r in answer["results"]}
    for name in ("2", "x"):
        assert rows[name]["error_code"] == 42, rows[name]  # INVALID_REQUEST
        assert "expected 1 or empty string" in rows[name]["error_message"]
    assert (rows[""]["error_code"], rows[""]["configs"]) == (0, [])
    assert {c["name"] for c in rows["1"]["configs"]} >= {"broker.id", "num.partitions"}


def test_a_topic_grows_after_another_topic_took_the_ids_after_it(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """CreatePartitions works whatever was made since: the topic's new
    partitions are a range of their own when the ids after it are taken.
    Records go to every partition by index, a consumer reads the new ones,
    a keyed native append spreads over all of them, and ``logs list`` shows
    the part and which partitions it holds.  Before, the growth failed with
    "logs 8..9 overlap the range 8..9"."""
    from confluent_kafka.admin import NewPartitions

    _create(cluster, NewTopic("grows", 2, 2), NewTopic("after-grows", 2, 2))
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_partitions([NewPartitions("grows", 5)])["grows"].result(30)
    with open_epoch_store(cluster.url) as store:
        parts = [(r.first, r.last) for r in store.log_ranges() if r.name == "grows"]
        other = store.log_range_named("after-grows")
    assert len(parts) == 2, parts
    assert parts[1][0] > other.last, parts
    topics = admin.list_topics("grows", timeout=30).topics
    assert sorted(topics["grows"].partitions) == [0, 1, 2, 3, 4]
    wait_for_partitions(cluster.kafka_bootstrap, "grows", 5)

    failed: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0})
    for p in range(5):
        producer.produce(
            "grows",
            value=b"to %d" % p,
            partition=p,
            on_delivery=lambda e, m: e and failed.append(e),
        )
    assert producer.flush(30) == 0
    assert failed == []
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "grows-r"})
    try:
        consumer.assign([TopicPartition("grows", p, 0) for p in range(5)])
        got = sorted((m.partition(), m.value()) for m in _messages(consumer, 5))
    finally:
        consumer.close()
    assert got == [(p, b"to %d" % p) for p in range(5)]
    # Kafka's partitioner over the five partitions (murmur2, as Java's) and
    # the native client's by name agree, key by key.
    keyed = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "partitioner": "murmur2_random"}
    )
    where: dict[bytes, int] = {}
    for i in range(30):
        key = b"key-%d" % i
        keyed.produce(
            "grows", key=key, value=b"v", on_delivery=lambda e, m: where.update({m.key(): m})
        )
    assert keyed.flush(30) == 0
    logs = [first + i for first, last in parts for i in range(last - first + 1)]
    with logstrand.connect(cluster.url) as client:
        # Partition 3 is the new part's second log.
        assert next(r.payload for r in client.read(parts[1][0] + 1)) == b"to 3"
        native = {k: client.log_of("grows", key=k) for k in where}
    assert native == {k: logs[m.partition()] for k, m in where.items()}
    assert len({m.partition() for m in where.values()}) == 5
    capsys.readouterr()
    assert main(["logs", "list", "--url", cluster.url]) == 0
    listed = capsys.readouterr().out
    assert f"{parts[1][0]}..{parts[1][1]} (grows, partitions 2..4)" in listed


def test_records_carry_their_epoch_and_an_epoch_ends_where_the_next_begins(
    cluster: LocalCluster,
) -> None:
    """Kafka's leader epoch is logstrand's epoch: each fetched batch carries
    its records' (librdkafka's ``Message.leader_epoch()``), and
    OffsetForLeaderEpoch says where an epoch ends, which is how a Kafka
    client checks after a failover that nothing it read was lost.  Before,
    every record had no epoch and API 23 was not served."""
    _create(cluster, NewTopic("epochs", 1, 2))
    log = _log_of(cluster, "epochs")
    assert _produce(cluster, "epochs", [(None, b"a"), (None, b"b")]) == [None, None]
    with logstrand.connect(cluster.url) as client:
        first = lsn_epoch(client.tail_lsn(log))
        sequencer = client.sequencer_node(log)
    assert sequencer is not None
    cluster.stop_node(sequencer)
    try:
        # The next append activates a sequencer on another node: a new epoch.
        with logstrand.connect(cluster.url) as client:
            second = lsn_epoch(client.append(log, b"c"))
    finally:
        cluster.start_node(sequencer)
    assert second > first
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "epochs-r"})
    try:
        consumer.assign([TopicPartition("epochs", 0, 0)])
        got = [(m.offset(), m.leader_epoch()) for m in _messages(consumer, 3)]
    finally:
        consumer.close()
    assert got == [(0, first), (1, first), (2, second)]

    def ask(epoch: int, partition: int = 0) -> tuple[int, int, int]:
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "epochs",
                    "partitions": [
                        {"partition": partition, "current_leader_epoch": -1, "leader_epoch": epoch}
                    ],
                }
            ],
        }
        with KafkaPeer(cluster.kafka_bootstrap.split(",")[0]) as peer:
            answer = peer.request(23, 4, body)
        assert answer is not None
        p = answer["topics"][0]["partitions"][0]
        return p["error_code"], p["leader_epoch"], p["end_offset"]

    assert ask(first) == (0, first, 2)  # the first epoch ends where the second starts
    assert ask(second) == (0, second, 3)  # the newest ends at the log's end
    assert ask(second + 5) == (0, second + 5, 3)  # one with nothing in it yet, too
    assert ask(-1) == (0, -1, -1)  # no epoch: Kafka's UNDEFINED
    assert ask(first, partition=7)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
@pytest.mark.parametrize("codec", ["gzip", "snappy", "zstd"])
def test_a_topic_sends_its_batches_in_its_compression_type(
    cluster: LocalCluster, codec: str
) -> None:
    """Every Kafka codec is a topic's compression.type: lz4 and zstd are the
    log's own codec too, gzip and snappy the front's alone.  A fetch answers
    with batches in it (seen raw on the wire), which librdkafka and
    kafka-python read; DescribeConfigs shows it, and the log keeps gzip and
    snappy topics' records uncompressed.  Before, gzip and snappy were
    INVALID_CONFIG and every fetch was uncompressed."""
    from confluent_kafka.admin import ConfigResource
    from kafka import KafkaConsumer

    topic = f"packed-{codec}"
    _create(cluster, NewTopic(topic, 1, 2, config={"compression.type": codec}))
    records = [(b"k%d" % i, b"a fairly repetitive value %d " % i * 40) for i in range(30)]
    assert _produce(cluster, topic, records) == [None] * 30
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    shown = admin.describe_configs([resource])[resource].result(30)["compression.type"]
    assert (shown.value, shown.is_default) == (codec, False)
    with open_epoch_store(cluster.url) as store:
        kept = store.log_range_named(topic).attributes.compression
    assert kept == ("zstd" if codec == "zstd" else "none")

    fetch = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    with KafkaPeer(cluster.kafka_bootstrap.split(",")[0]) as peer:
        answer = peer.request(1, 11, fetch)
    assert answer is not None
    wire = answer["responses"][0]["partitions"][0]["records"]
    batches = decode_batches(wire)
    assert {b.codec for b in batches} == {codec}
    assert sum(len(v) for b in batches for v in b.values) > 4 * len(wire)

    assert _consume(cluster, topic, 30) == [(i, k, v) for i, (k, v) in enumerate(records)]
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.kafka_bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    got = []
    try:
        for m in consumer:  # ends after 10 s without a message
            got.append((m.offset, m.key, m.value))
            if len(got) == len(records):
                break
    finally:
        consumer.close()
    assert got == [(i, k, v) for i, (k, v) in enumerate(records)]

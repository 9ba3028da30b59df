"""The Kafka front driven by real Kafka clients: librdkafka (confluent-kafka),
kafka-python and kcat, against real node processes that each serve it
(``logstrand node --kafka-port``).  Nothing here uses the front's codec."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as NewAioTopic
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

import logstrand
from logstrand import Record
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

from .kafka_raw import wait_for_partitions

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka") / "c", nodes=3, kafka=True) as c:
        yield c


def _consume(bootstrap: str, parts: list[TopicPartition], count: int) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp) of ``count``
    messages from ``parts``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False}
    )
    try:
        consumer.assign(parts)
        got: list[tuple] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(
                (m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1])
            )
        return got
    finally:
        consumer.close()


def test_kcat_lists_the_nodes_as_brokers_and_named_ranges_as_topics(cluster: LocalCluster) -> None:
    with open_epoch_store(cluster.url) as store:
        store.create_logs(900, 903, LogAttributes(replication_factor=2), name="listed")
    out = subprocess.run(
        ["kcat", "-b", cluster.kafka_bootstrap, "-L", "-J"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    meta = json.loads(out.stdout)
    assert sorted(b["id"] for b in meta["brokers"]) == [1, 2, 3]
    topic = next(t for t in meta["topics"] if t["topic"] == "listed")
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2, 3]
    with logstrand.connect(cluster.url) as client:
        for p in topic["partitions"]:
            # The leader is the node that runs the partition's log's sequencer.
            assert p["leader"] == client.sequencer_node(900 + p["partition"])


def test_kcat_produces_from_a_pipe_and_consumes_keys_and_values(cluster: LocalCluster) -> None:
    lines = "".join(f"k{i}:value {i}\n" for i in range(50))
    subprocess.run(
        [
            "kcat",
            "-b",
            cluster.kafka_bootstrap,
            "-P",
            "-t",
            "piped",
            "-K:",
            "-p",
            "0",
            "-H",
            "source=pipe",
            "-H",
            "run=1",
        ],
        input=lines,
        text=True,
        timeout=60,
        check=True,
    )
    out = subprocess.run(
        ["kcat", "-b", cluster.kafka_bootstrap, "-C", "-t", "piped", "-e", "-f", "%o %k %s %h\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.splitlines() == [f"{i} k{i} value {i} source=pipe,run=1" for i in range(50)]
    # A native reader of the log sees the same headers.
    with logstrand.connect(cluster.url) as client:
        records = [r for r in client.read(client.log_of("piped")) if isinstance(r, Record)]
    assert {r.headers for r in records} == {(("source", b"pipe"), ("run", b"1"))}


def test_admin_creates_describes_and_deletes_topics(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    made = admin.create_topics(
        [NewTopic("orders", 3, 2, config={"cleanup.policy": "compact", "retention.ms": "3600000"})]
    )
    made["orders"].result(30)
    with pytest.raises(Exception, match="already exists"):
        admin.create_topics([NewTopic("orders", 1, 2)])["orders"].result(30)
    bad = admin.create_topics([NewTopic("bad-config", 1, 2, config={"segment.ms": "1"})])
    with pytest.raises(Exception, match=r"segment\.ms"):
        bad["bad-config"].result(30)
    with open_epoch_store(cluster.url) as store:
        r = store.log_range_named("orders")
    assert r.last - r.first == 2
    assert r.attributes.cleanup_policy == "compact"
    assert r.attributes.retention_ms == 3_600_000
    listed = admin.list_topics(timeout=30).topics
    assert len(listed["orders"].partitions) == 3
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
    for p in range(3):
        producer.produce("orders", key=b"k", value=b"before", partition=p)
    assert producer.flush(30) == 0
    admin.delete_topics(["orders"])["orders"].result(30)
    with open_epoch_store(cluster.url) as store:
        assert all(x.name != "orders" for x in store.log_ranges())
    # Made again, it starts empty, on logs no epoch was ever taken in.
    admin.create_topics([NewTopic("orders", 1, 2)])["orders"].result(30)
    with open_epoch_store(cluster.url) as store:
        again = store.log_range_named("orders")
    assert again.first > r.last
    # Every front serves the new range once its view has read it (within
    # its refresh, 2 s): the topic's watermarks are then those of empty logs.
    # Until then a front that has not read it yet answers as a Kafka broker
    # that has not heard of a new topic does: unknown topic (a CI run under
    # load saw that answer, which the loop had taken as final).
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "t"})
    marks: tuple[int, int] | None = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                marks = consumer.get_watermark_offsets(TopicPartition("orders", 0), timeout=30)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                marks = None
            if marks == (0, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        consumer.close()
    assert marks == (0, 0)


def test_offsets_stay_dense_across_a_sequencer_kill(cluster: LocalCluster) -> None:
    """An idempotent librdkafka producer produces with keys, the sequencer's
    node is killed while it produces more: every message once, in order,
    offsets 0..n-1 with no jump at the new epoch, and logstrand's own reader
    sees the same records."""
    bootstrap = cluster.kafka_bootstrap
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )

    def produce(i: int) -> None:
        # Headers on every third message, and a create time of the producer's own.
        headers = [("n", b"%d" % i), ("null", None)] if i % 3 == 0 else None
        producer.produce(
            "failover", key=b"k%d" % i, value=b"v%d" % i, headers=headers, timestamp=10_000 + i
        )

    for i in range(200):
        produce(i)
    assert producer.flush(30) == 0
    with logstrand.connect(cluster.url) as client:
        log = client.log_of("failover")
        victim = client.sequencer_node(log)
        assert victim is not None
        cluster.kill_node(victim)
        try:
            for i in range(200, 400):
                produce(i)
            assert producer.flush(60) == 0
            got = _consume(bootstrap, [TopicPartition("failover", 0, OFFSET_BEGINNING)], 400)
            assert [g[1] for g in got] == list(range(400))
            assert [g[3] for g in got] == [b"v%d" % i for i in range(400)]
            assert [g[2] for g in got] == [b"k%d" % i for i in range(400)]
            want = [[("n", b"%d" % i), ("null", None)] if i % 3 == 0 else None for i in range(400)]
            assert [g[4] for g in got] == want
            assert [g[5] for g in got] == [10_000 + i for i in range(400)]
            native = [r for r in client.read(log) if isinstance(r, Record)]
            assert [r.payload for r in native] == [g[3] for g in got]
            assert [list(r.headers) or None for r in native] == want
            assert [r.create_time for r in native] == [10_000 + i for i in range(400)]
            assert len({r.epoch for r in native}) == 2
        finally:
            cluster.start_node(victim)
            cluster.wait_ready(victim)


def test_consumers_start_at_the_end_and_at_a_time(cluster: LocalCluster) -> None:
    bootstrap = cluster.kafka_bootstrap
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce("timed", value=b"old %d" % i)
    assert producer.flush(30) == 0
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(10):
        producer.produce("timed", value=b"new %d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t2"})
    try:
        found = consumer.offsets_for_times([TopicPartition("timed", 0, cut_ms)], timeout=30)
        assert found[0].offset == 20
        low, high = consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=30)
        assert (low, high) == (0, 30)
    finally:
        consumer.close()
    got = _consume(bootstrap, [TopicPartition("timed", 0, 20)], 10)
    assert [g[3] for g in got] == [b"new %d" % i for i in range(10)]
    # From the end: only what comes after the consumer started.
    # No group commits: groups are not served yet, and a consumer that commits
    # on close waits for a coordinator there is none of.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t3", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition("timed", 0, OFFSET_END)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not consumer.assignment():
            consumer.poll(0.1)
        consumer.poll(1.0)
        producer.produce("timed", value=b"latest")
        assert producer.flush(30) == 0
        m = None
        deadline = time.monotonic() + 30
        while m is None and time.monotonic() < deadline:
            m = consumer.poll(0.2)
        assert m is not None
        assert m.error() is None
        assert (m.offset(), m.value()) == (30, b"latest")
    finally:
        consumer.close()


# kafka-python 3 reads its own schemas with importlib.resources.read_text.
@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_kafka_python_produces_consumes_and_lists_offsets(cluster: LocalCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    # kafka-python 3 is idempotent by default: InitProducerId, then numbered batches.
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all")
    futures = [producer.send("kp", key=b"k", value=b"m%d" % i, partition=0) for i in range(30)]
    producer.flush(30)
    assert [f.get(30).offset for f in futures] == list(range(30))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, consumer_timeout_ms=10_000)
    tp = KTopicPartition("kp", 0)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 30}
    consumer.seek_to_beginning(tp)
    got = [(m.offset, m.value) for _, m in zip(range(30), consumer, strict=False)]
    consumer.close()
    assert got == [(i, b"m%d" % i) for i in range(30)]


def test_bad_input_ends_its_connection_and_nothing_else(cluster: LocalCluster) -> None:
    port = cluster.kafka_ports[1]
    for junk in (
        b"\x7f\xff\xff\xff",  # a frame of 2 GiB
        # Metadata v12 whose header's tagged fields run past the frame.
        b"\x00\x00\x00\x0c\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\xff\xff",
        b"\x00\x00\x00\x08\x03\xe7\x00\x00\x00\x00\x00\x01",  # API key 999
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(junk)
            assert s.recv(100) == b""  # closed, nothing answered
    out = subprocess.run(
        ["kcat", "-b", f"127.0.0.1:{port}", "-L", "-J"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert len(json.loads(out.stdout)["brokers"]) == 3


def _frame(s: socket.socket) -> bytes:
    size = int.from_bytes(s.recv(4), "big")
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    return data


def test_apis_not_served_get_an_error_code_and_the_connection_stays(cluster: LocalCluster) -> None:
    """Transactions, quotas, share groups, an old Fetch: each answered with
    Kafka's error code on a connection that goes on serving."""
    from logstrand.kafka import _protocol as proto

    asked = [
        (24, 4, {"transactions": []}),
        (48, 1, {"components": [], "strict": False}),
        (76, 0, {"group_id": "g", "member_id": "m", "member_epoch": 0}),
        (1, 3, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": []}),
        (38, 2, {"renewers": [], "max_lifetime_ms": -1}),
        (75, 0, {"topics": [{"name": "t"}], "response_partition_limit": 10, "cursor": None}),
    ]
    with socket.create_connection(("127.0.0.1", cluster.kafka_ports[1]), timeout=10) as s:
        for corr, (key, version, body) in enumerate(asked, 1):
            s.sendall(proto.encode_request(key, version, corr, body))
            got_corr, answer = proto.decode_response(key, version, _frame(s))
            assert got_corr == corr
            # Fetch v3 and DescribeTopicPartitions have no top-level error
            # code: an empty answer then.
            if key == 75:
                assert answer["topics"] == [], answer
            else:
                assert answer.get("error_code") in ((0,) if key == 1 else (35, 61)), (key, answer)
        s.sendall(
            proto.encode_request(
                18, 3, 99, {"client_software_name": "t", "client_software_version": "1"}
            )
        )
        _, versions = proto.decode_response(18, 3, _frame(s))
    served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
    # What is advertised is what is served: no transactions, quotas or share groups.
    assert not {24, 25, 26, 28, 48, 49, 75, 76, 78} & set(served)
    assert served[68] == (0, 1)
    assert served[1] == (4, 12)


def test_status_shows_each_node_s_kafka_address(cluster: LocalCluster, tmp_path: Path) -> None:
    import os
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "logstrand", "status", "--json"],
        env={**os.environ, **cluster.client_env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    nodes = json.loads(out.stdout)["nodes"]
    assert {n["node_id"]: n["kafka"] for n in nodes} == {
        n: f"127.0.0.1:{p}" for n, p in cluster.kafka_ports.items()
    }


def test_admin_configs_partitions_records_and_the_cluster(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    bootstrap = cluster.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("admin-t", 1, 2)])["admin-t"].result(30)
    res = ConfigResource(ResourceType.TOPIC, "admin-t")
    configs = next(iter(admin.describe_configs([res]).values())).result(30)
    assert configs["cleanup.policy"].value == "delete"
    assert configs["retention.ms"].value == "-1"
    change = ConfigResource(
        ResourceType.TOPIC,
        "admin-t",
        incremental_configs=[
            ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    next(iter(admin.incremental_alter_configs([change]).values())).result(30)
    with open_epoch_store(cluster.url) as store:
        assert store.log_range_named("admin-t").attributes.retention_ms == 86_400_000
    bad = ConfigResource(
        ResourceType.TOPIC,
        "admin-t",
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="retention"):
        next(iter(admin.incremental_alter_configs([bad]).values())).result(30)
    # Two more partitions: the ids after the topic's are free and unused.
    admin.create_partitions([NewPartitions("admin-t", 3)])["admin-t"].result(30)
    with open_epoch_store(cluster.url) as store:
        r = store.log_range_named("admin-t")
    assert r.last - r.first == 2
    wait_for_partitions(bootstrap, "admin-t", 3)
    failed: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(
            "admin-t",
            value=b"r%d" % i,
            partition=2,
            on_delivery=lambda e, m: e and failed.append(e),
        )
    assert producer.flush(30) == 0
    assert failed == []
    done = admin.delete_records([TopicPartition("admin-t", 2, 4)])
    assert next(iter(done.values())).result(30).low_watermark == 4
    got = _consume(bootstrap, [TopicPartition("admin-t", 2, OFFSET_BEGINNING)], 6)
    assert [(g[1], g[3]) for g in got] == [(i, b"r%d" % i) for i in range(4, 10)]
    described = admin.describe_cluster().result(30)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.cluster_id == cluster.cluster


def _request(port: int, api_key: int, version: int, body: dict) -> dict:
    """One request to a front, by hand (for what clients do not let a test
    do on purpose: send a batch twice, or skip a sequence number)."""
    from logstrand.kafka import _protocol as proto

    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(proto.encode_request(api_key, version, 7, body))
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        size = int.from_bytes(head, "big")
        frame = b""
        while len(frame) < size:
            frame += s.recv(size - len(frame))
    return proto.decode_response(api_key, version, frame)[1]


def test_a_retried_idempotent_batch_is_stored_once(cluster: LocalCluster) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    port = cluster.kafka_ports[2]
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic("idem", 1, 2)])["idem"].result(30)
    pid = _request(port, 22, 4, {"transactional_id": None, "transaction_timeout_ms": 0})
    assert pid["error_code"] == 0

    def batch(seq: int, n: int) -> bytes:
        b = DefaultRecordBatchBuilder(2, 0, False, pid["producer_id"], 0, seq, 1 << 20)
        for i in range(n):
            b.append(i, timestamp=1, key=None, value=b"s%d" % (seq + i), headers=[])
        return bytes(b.build())

    def produce(data: bytes) -> dict:
        body = {
            "acks": -1,
            "timeout_ms": 30_000,
            "topic_data": [{"name": "idem", "partition_data": [{"index": 0, "records": data}]}],
        }
        return _request(port, 0, 9, body)["responses"][0]["partition_responses"][0]

    first = produce(batch(0, 3))
    again = produce(batch(0, 3))  # the producer's retry of an answer it lost
    assert (first["error_code"], again["error_code"]) == (0, 0)
    assert first["base_offset"] == again["base_offset"] == 0
    assert produce(batch(3, 2))["base_offset"] == 3
    gap = produce(batch(9, 1))
    assert gap["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    got = _consume(cluster.kafka_bootstrap, [TopicPartition("idem", 0, OFFSET_BEGINNING)], 5)
    assert [g[3] for g in got] == [b"s0", b"s1", b"s2", b"s3", b"s4"]
    refused = _request(port, 22, 4, {"transactional_id": "tx-1", "transaction_timeout_ms": 60_000})
    assert refused["error_code"] == 53  # transactions: not served


@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")
def test_old_produce_versions_with_message_sets_before_v2(cluster: LocalCluster) -> None:
    """kafka-python told the broker is 0.10 sends Produce v2 with magic-1
    message sets, told 0.9, Produce v1 with magic 0."""
    from kafka import KafkaProducer

    got = []
    for version in ((0, 10, 0), (0, 9)):
        producer = KafkaProducer(
            bootstrap_servers=cluster.kafka_bootstrap, api_version=version, acks="all"
        )
        futures = [producer.send("old", value=b"m%d" % i, partition=0) for i in range(5)]
        producer.flush(30)
        got += [f.get(30).offset for f in futures]
        producer.close()
    assert got == list(range(10))
    read = _consume(cluster.kafka_bootstrap, [TopicPartition("old", 0, OFFSET_BEGINNING)], 10)
    assert [g[3] for g in read] == [b"m%d" % i for i in range(5)] * 2


def _kcat_produce(bootstrap: str, lines: str, *args: str) -> None:
    subprocess.run(
        ["kcat", "-b", bootstrap, "-P", *args], input=lines, text=True, timeout=60, check=True
    )


def _kcat_metadata(bootstrap: str, topic: str) -> dict[str, Any]:
    """``kcat -L -J`` of one topic."""
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-L", "-J", "-t", topic],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    meta: dict[str, Any] = json.loads(out.stdout)
    return meta


#: ``kafka serve`` makes topics producers name, with two partitions each,
#: and serves transactions.
SERVE_ARGS = ("--auto-create", "--num-partitions", "2", "--transactions")


def test_a_front_of_its_own_serves_the_cluster(cluster: LocalCluster) -> None:
    """``logstrand kafka serve``: one broker (id 0) answering for every topic."""
    import os
    import signal
    import sys

    with open_epoch_store(cluster.url) as store:
        store.create_logs(950, 951, LogAttributes(replication_factor=2), name="alone")
    proc = subprocess.Popen(
        [sys.executable, "-m", "logstrand", "kafka", "serve", "--port", "0", *SERVE_ARGS],
        env={**os.environ, **cluster.client_env(), "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("kafka bootstrap 127.0.0.1:"), line
        bootstrap = line.split(" ")[2]
        _kcat_produce(bootstrap, "one\ntwo\n", "-t", "alone", "-p", "1")
        meta = _kcat_metadata(bootstrap, "alone")
        assert [b["id"] for b in meta["brokers"]] == [0]
        assert [p["leader"] for p in meta["topics"][0]["partitions"]] == [0, 0]
        with logstrand.connect(cluster.url) as client:
            got = [r.payload for r in client.read(951) if isinstance(r, Record)]
        assert got == [b"one", b"two"]
        # A topic named by a producer is made with --num-partitions.
        _kcat_produce(bootstrap, "x\n", "-t", "alone-made")
        made = _kcat_metadata(bootstrap, "alone-made")
        assert len(made["topics"][0]["partitions"]) == 2
        # It coordinates transactions too: one commits into partition 0.
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "alone-txn"})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("alone", value=b"three", partition=0)
        txn.commit_transaction(30)
        with logstrand.connect(cluster.url) as client:
            got = [r.payload for r in client.read(950) if isinstance(r, Record)]
        assert got == [b"three"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_topic_read_by_name_natively_has_what_kafka_consumers_see(
    cluster: LocalCluster,
) -> None:
    """``read_many("orders2")`` reads every log of the range, as a Kafka
    consumer of every partition does: the same records, log by log."""
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic("orders2", 3, 2)])["orders2"].result(30)
    for i in range(60):
        producer.produce("orders2", key=b"user-%d" % (i % 7), value=b"o%d" % i)
    assert producer.flush(30) == 0
    parts = [TopicPartition("orders2", p, OFFSET_BEGINNING) for p in range(3)]
    theirs = sorted((g[0], g[3]) for g in _consume(cluster.kafka_bootstrap, parts, 60))
    with open_epoch_store(cluster.url) as store:
        first = store.log_range_named("orders2").first
    with logstrand.connect(cluster.url) as client:
        ours = sorted(
            (log - first, item.payload)
            for log, item in client.read_many("orders2")
            if isinstance(item, Record)
        )
        with pytest.raises(logstrand.NotFoundError):
            list(client.read_many("no-such-range"))
    assert ours == theirs
    assert len(ours) == 60


def test_headers_appended_natively_reach_kafka_consumers_columns_and_arrow(
    cluster: LocalCluster,
) -> None:
    """Headers and create times are the records' own: appended natively
    (one record, a batch), they come back from ``read``, ``read_columns``
    and ``read_arrow``, and a Kafka consumer sees them as Kafka headers and
    CreateTime."""
    with open_epoch_store(cluster.url) as store:
        store.create_logs(960, 960, LogAttributes(replication_factor=2), name="hdrs")
        store.create_logs(961, 961, LogAttributes(replication_factor=2))
    with logstrand.connect(cluster.url) as client:
        one = client.append(960, b"solo", key=b"k", headers=[("a", b"1")])
        lsns = client.append_batch(
            "hdrs",
            [b"x", b"y", b"z"],
            headers=[[("b", None)], None, [("c", b""), ("c", b"2")]],
            create_times=[111, None, 333],
        )
        assert lsns[0] > one
        records = [r for r in client.read(960) if isinstance(r, Record)]
        want = [(("a", b"1"),), (("b", None),), (), (("c", b""), ("c", b"2"))]
        assert [r.headers for r in records] == want
        assert [r.create_time for r in records] == [None, 111, None, 333]
        (cols,) = [c for c in client.read_columns(960) if len(c)]
        assert cols.headers == want
        assert cols.create_times == [None, 111, None, 333]
        table = pa.Table.from_batches(list(client.read_arrow(960)))
        assert table.column("headers").to_pylist() == [
            [{"key": k, "value": v} for k, v in hs] or None for hs in want
        ]
        created = table.column("create_time").cast(pa.int64()).to_pylist()
        assert created == [None, 111_000, None, 333_000]
        with pytest.raises(logstrand.InvalidArgumentError):
            client.append(960, b"bad", headers=[("n", "not bytes")])  # type: ignore[list-item]
        log_times = [r.timestamp for r in records]
        # The one-record producer: records with and without headers share its
        # APPENDs, in the order they were given.
        futures = [
            client.append_async(961, b"a%d" % i, headers=[("i", b"%d" % i)] if i % 3 else None)
            for i in range(30)
        ]
        assert client.flush(30) == 0
        lsns = [f.result() for f in futures]
        assert lsns == sorted(lsns)
        produced = [r for r in client.read(961) if isinstance(r, Record)]
        assert [(r.payload, r.headers) for r in produced] == [
            (b"a%d" % i, (("i", b"%d" % i),) if i % 3 else ()) for i in range(30)
        ]
    got = _consume(cluster.kafka_bootstrap, [TopicPartition("hdrs", 0, OFFSET_BEGINNING)], 4)
    assert [g[3] for g in got] == [b"solo", b"x", b"y", b"z"]
    assert [g[4] for g in got] == [list(hs) or None for hs in want]
    # CreateTime where the producer gave one, else the log's own time.
    assert [g[5] for g in got] == [log_times[0], 111, log_times[2], 333]


def test_aiokafka_admin_idempotent_producer_and_consumer(cluster: LocalCluster) -> None:
    """aiokafka (asyncio, its own protocol code): create a topic, produce
    idempotently with keys and headers, read it back from the beginning and
    ask for the end offsets."""
    bootstrap = cluster.kafka_bootstrap

    async def run() -> tuple[list[tuple[Any, ...]], int, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewAioTopic("aio", 2, 2)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(100):
                await producer.send(
                    "aio", b"v%d" % i, key=b"k%d" % i, partition=i % 2, headers=[("n", b"%d" % i)]
                )
            last = await producer.send_and_wait("aio", b"last", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            parts = [AioPartition("aio", 0), AioPartition("aio", 1)]
            consumer.assign(parts)
            await consumer.seek_to_beginning()
            got: list[tuple[Any, ...]] = []
            deadline = time.monotonic() + 30
            while len(got) < 101 and time.monotonic() < deadline:
                for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                    got += [(tp.partition, m.offset, m.key, m.value, m.headers) for m in msgs]
            ends = await consumer.end_offsets(parts)
        finally:
            await consumer.stop()
        return got, last.offset, ends[parts[0]]

    got, last_offset, end = asyncio.run(run())
    assert (last_offset, end) == (50, 51)
    first = sorted(g for g in got if g[0] == 0)
    assert [g[1] for g in first] == list(range(51))
    assert first[3] == (0, 3, b"k6", b"v6", (("n", b"6"),))
    assert len(got) == 101

"""What the Kafka benches share: sending records through a confluent-kafka
producer without overflowing its queue, and reading a partition from its
start with a consumer, timed."""

from __future__ import annotations

import time
from typing import Any


def send(producer: Any, topic: str, payload: bytes, n: int) -> None:
    """Produce ``n`` records of ``payload`` to partition 0, waiting for room
    when the producer's queue is full (the caller flushes)."""
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)


def consume(bootstrap: str, topic: str, n: int, isolation: str = "read_committed") -> float:
    """Records/s of a consumer reading ``n`` records of partition 0 of
    ``topic`` from its start (librdkafka's default isolation unless told)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    # The topic's metadata first, as a consumer that has run a while has it:
    # librdkafka assigned a partition whose leader it does not know yet
    # starts a 500 ms offset-query timer ("no current leader for partition:
    # (re)starting offset query timer", debug=all), a fixed cost of its start
    # that is neither the broker's nor a rate.  Redis's client is connected
    # before its clock starts too (kafka_redis.py).
    c.list_topics(topic, timeout=30)
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error() is None:
                got += 1
    took = time.perf_counter() - t0
    c.close()
    assert got == n, f"{isolation}: read {got} of {n}"
    return n / took

"""A Kafka consumer group member, run as a process of its own by the group
tests (so that a test can kill it).  It appends to OUT, one line per event:

    assigned T:P,T:P      after each assignment (also when empty)
    got P O               a message handed to it
    committed P O         after its commit returned (the next read of P starts at O + 1)

Usage: kafka_member.py CLIENT BOOTSTRAP GROUP TOPIC OUT [key=value ...]
CLIENT is confluent, kafka-python or aiokafka; key=value pairs are
extra configuration (confluent names), such as group.protocol=consumer or
group.instance.id=a.  It commits after each message it processed
(``enable.auto.commit`` off) and runs until SIGTERM or SIGKILL.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any, TextIO


def _confluent(bootstrap: str, group: str, topic: str, out: TextIO, extra: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if extra.get("group.protocol") != "consumer":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    conf.update(extra)
    consumer = Consumer(conf)

    held: set[Any] = set()

    def assigned(c: Any, parts: list[Any]) -> None:
        held.update((p.topic, p.partition) for p in parts)
        out.write(f"assigned {','.join(f'{t}:{p}' for t, p in sorted(held))}\n")
        out.flush()

    def revoked(c: Any, parts: list[Any]) -> None:
        held.difference_update((p.topic, p.partition) for p in parts)
        assigned(c, [])

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        out.write(f"got {m.partition()} {m.offset()}\n")
        out.flush()
        try:
            consumer.commit(
                offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1)],
                asynchronous=False,
            )
        except KafkaException as exc:  # a rebalance under way: another member reads it again
            out.write(f"uncommitted {m.partition()} {m.offset()} {exc}\n")
            continue
        out.write(f"committed {m.partition()} {m.offset()}\n")
        out.flush()
    consumer.close()


def _kafka_python(
    bootstrap: str, group: str, topic: str, out: TextIO, extra: dict[str, Any]
) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.errors import CommitFailedError
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        api_version=(2, 5),
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        def on_partitions_assigned(self, parts: Any) -> None:
            out.write(f"assigned {','.join(f'{p.topic}:{p.partition}' for p in parts)}\n")
            out.flush()

    consumer.subscribe([topic], listener=Listener())
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        for tp, messages in consumer.poll(200).items():
            for m in messages:
                out.write(f"got {m.partition} {m.offset}\n")
                offset = OffsetAndMetadata(m.offset + 1, "", -1)
                try:
                    consumer.commit({TopicPartition(tp.topic, tp.partition): offset})
                except CommitFailedError as exc:
                    out.write(f"uncommitted {m.partition} {m.offset} {exc}\n")
                    continue
                out.write(f"committed {m.partition} {m.offset}\n")
                out.flush()
    consumer.close()


async def _aiokafka(
    bootstrap: str, group: str, topic: str, out: TextIO, extra: dict[str, Any]
) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import CommitFailedError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        async def on_partitions_assigned(self, parts: Any) -> None:
            out.write(f"assigned {','.join(f'{p.topic}:{p.partition}' for p in parts)}\n")
            out.flush()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    consumer.subscribe([topic], listener=Listener())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for tp, messages in batches.items():
                for m in messages:
                    out.write(f"got {m.partition} {m.offset}\n")
                    try:
                        await consumer.commit(
                            {TopicPartition(tp.topic, tp.partition): m.offset + 1}
                        )
                    except CommitFailedError as exc:
                        out.write(f"uncommitted {m.partition} {m.offset} {exc}\n")
                        continue
                    out.write(f"committed {m.partition} {m.offset}\n")
                    out.flush()
    finally:
        await consumer.stop()


def main() -> None:
    client, bootstrap, group, topic, path, *pairs = sys.argv[1:]
    extra: dict[str, Any] = dict(p.split("=", 1) for p in pairs)
    with open(path, "a", buffering=1) as out:
        if client == "confluent":
            _confluent(bootstrap, group, topic, out, extra)
        elif client == "kafka-python":
            _kafka_python(bootstrap, group, topic, out, extra)
        else:
            asyncio.run(_aiokafka(bootstrap, group, topic, out, extra))


if __name__ == "__main__":
    main()

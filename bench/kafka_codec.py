# mypy: disable-error-code="arg-type"
# (kio's messages take NewTypes of int and str: plain values, as the wire has them.)
"""The Kafka front's codec against kio's, on the messages the front handles
most: the codec compiled here from Kafka's JSON schemas
(``logstrand/kafka/_codec.py``) and kio (generated from the same schemas,
with a native reader), in the same process, each case run by both in turn.

* decode a Produce v9 request, 1 topic x 8 partitions of 16 KiB record bytes;
* build and encode a Fetch v12 response, 8 partitions of 64 KiB record bytes;
* build and encode a Metadata v12 response of 200 topics x 8 partitions;
* decode a Metadata v12 request naming 200 topics;
* decode the records of a 1 MiB RecordBatch v2 of 100 B records (what a
  Produce request carries per partition; ``_records.decode_batches``).

Build-and-encode times include making the message (dicts here, kio's
dataclasses there), as the front makes its answers.  Prints microseconds per
message (median of ``--repeat`` runs) and kio's time over ours.

    .venv/bin/python bench/kafka_codec.py --repeat 5
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import uuid
from typing import TYPE_CHECKING, Any

from logstrand.kafka import _protocol as proto
from logstrand.kafka._records import decode_batches
from logstrand.kafka._records_encode import encode_columns

if TYPE_CHECKING:
    from collections.abc import Callable

TOPICS = 200
PARTITIONS = 8
RECORDS = bytes(range(256)) * 64  # 16 KiB of "record batch" bytes
BATCH = b""  # record_batch(), made in main


def _time(fn: Callable[[], object], seconds: float = 0.5) -> float:
    """Microseconds per call, over about ``seconds``."""
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            fn()
        n += 10
    return elapsed / n * 1e6


# -- ours ------------------------------------------------------------------------------


def ours_produce_frame() -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": "orders",
                "partition_data": [{"index": i, "records": RECORDS} for i in range(PARTITIONS)],
            }
        ],
    }
    return proto.encode_request(0, 9, 1, body)[4:]


def ours_fetch() -> bytes:
    parts = [
        {
            "partition_index": i,
            "error_code": 0,
            "high_watermark": 1_000_000,
            "last_stable_offset": 1_000_000,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": RECORDS * 4,
        }
        for i in range(PARTITIONS)
    ]
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "orders", "partitions": parts}],
    }
    return proto.encode_response(1, 12, 7, body)


def ours_metadata() -> bytes:
    topics = [
        {
            "error_code": 0,
            "name": f"topic-{t}",
            "topic_id": uuid.UUID(int=t + 1),
            "is_internal": False,
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": p,
                    "leader_id": 1 + p % 3,
                    "leader_epoch": -1,
                    "replica_nodes": [1 + p % 3, 1 + (p + 1) % 3],
                    "isr_nodes": [1 + p % 3, 1 + (p + 1) % 3],
                    "offline_replicas": [],
                }
                for p in range(PARTITIONS)
            ],
            "topic_authorized_operations": -(2**31),
        }
        for t in range(TOPICS)
    ]
    brokers = [
        {"node_id": n, "host": "127.0.0.1", "port": 9000 + n, "rack": None} for n in (1, 2, 3)
    ]
    body = {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": "c",
        "controller_id": 1,
        "topics": topics,
    }
    return proto.encode_response(3, 12, 7, body)


def record_batch() -> bytes:
    """About 1 MiB of 100 B records in one RecordBatch v2, as a producer
    sends them (create times a few ms apart).  Written by the front's own
    encoder, which tests/unit/test_kafka_codec.py checks against
    kafka-python's (whose package this directory's kafka.py hides)."""
    n = 1_000_000 // 110
    return encode_columns(
        list(range(n)),
        [1_700_000_000_000 + i // 200 for i in range(n)],
        [None] * n,
        [b"x" * 100] * n,
    )


def ours_metadata_request() -> bytes:
    body = {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": f"topic-{t}"} for t in range(TOPICS)],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return proto.encode_request(3, 12, 1, body)[4:]


# -- kio ---------------------------------------------------------------------------------


def kio_cases() -> dict[str, Callable[[], object]]:
    """kio's side of each case (imported here: kio is a test extra)."""
    from kio.records.readers import read_batch
    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v12 import response as fetch
    from kio.schema.metadata.v12 import request as mreq
    from kio.schema.metadata.v12 import response as meta
    from kio.schema.produce.v9 import request as produce
    from kio.serial import entity_reader, entity_writer

    write_fetch = entity_writer(fetch.FetchResponse)
    write_meta = entity_writer(meta.MetadataResponse)
    read_produce = entity_reader(produce.ProduceRequest)
    read_mreq = entity_reader(mreq.MetadataRequest)
    write_produce = entity_writer(produce.ProduceRequest)
    write_mreq = entity_writer(mreq.MetadataRequest)

    def fetch_response() -> bytes:
        parts = tuple(
            fetch.PartitionData(
                partition_index=i,
                error_code=ErrorCode.none,
                high_watermark=1_000_000,
                last_stable_offset=1_000_000,
                log_start_offset=0,
                aborted_transactions=None,
                records=RECORDS * 4,
            )
            for i in range(PARTITIONS)
        )
        msg = fetch.FetchResponse(
            throttle_time=_ms(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=(fetch.FetchableTopicResponse(topic="orders", partitions=parts),),
        )
        out = io.BytesIO()
        write_fetch(out, msg)
        return out.getvalue()

    def metadata_response() -> bytes:
        topics = tuple(
            meta.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                partitions=tuple(
                    meta.MetadataResponsePartition(
                        error_code=ErrorCode.none,
                        partition_index=p,
                        leader_id=1 + p % 3,
                        replica_nodes=(1 + p % 3, 1 + (p + 1) % 3),
                        isr_nodes=(1 + p % 3, 1 + (p + 1) % 3),
                    )
                    for p in range(PARTITIONS)
                ),
            )
            for t in range(TOPICS)
        )
        brokers = tuple(
            meta.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9000 + n)
            for n in (1, 2, 3)
        )
        msg = meta.MetadataResponse(
            throttle_time=_ms(0), brokers=brokers, cluster_id="c", controller_id=1, topics=topics
        )
        out = io.BytesIO()
        write_meta(out, msg)
        return out.getvalue()

    # The request bodies, written by kio itself so that its reader reads its own.
    body = io.BytesIO()
    write_produce(
        body,
        produce.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=_ms(30_000),
            topic_data=(
                produce.TopicProduceData(
                    name="orders",
                    partition_data=tuple(
                        produce.PartitionProduceData(index=i, records=RECORDS)
                        for i in range(PARTITIONS)
                    ),
                ),
            ),
        ),
    )
    produce_body = body.getvalue()
    body = io.BytesIO()
    write_mreq(
        body,
        mreq.MetadataRequest(
            topics=tuple(
                mreq.MetadataRequestTopic(topic_id=None, name=f"topic-{t}") for t in range(TOPICS)
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    mreq_body = body.getvalue()
    return {
        "produce request, decode": lambda: read_produce(produce_body, 0),
        "fetch response, build + encode": fetch_response,
        "metadata response, build + encode": metadata_response,
        "metadata request, decode": lambda: read_mreq(mreq_body, 0),
        "1 MiB record batch, decode": lambda: read_batch(BATCH, 0),
    }


def _ms(n: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    global BATCH
    BATCH = record_batch()
    served = {0: (9, 9), 3: (12, 12)}
    produce_frame, mreq_frame = ours_produce_frame(), ours_metadata_request()
    ours: dict[str, Callable[[], object]] = {
        "produce request, decode": lambda: proto.decode_request(produce_frame, served),
        "fetch response, build + encode": ours_fetch,
        "metadata response, build + encode": ours_metadata,
        "metadata request, decode": lambda: proto.decode_request(mreq_frame, served),
        "1 MiB record batch, decode": lambda: decode_batches(BATCH),
    }
    theirs = kio_cases()
    print(f"{'case':36} {'logstrand us':>13} {'kio us':>10} {'kio/ours':>9}")
    for case, fn in ours.items():
        mine, kio = [], []
        for _ in range(args.repeat):
            mine.append(_time(fn))
            kio.append(_time(theirs[case]))
        a, b = statistics.median(mine), statistics.median(kio)
        print(f"{case:36} {a:13.1f} {b:10.1f} {b / a:9.2f}")


if __name__ == "__main__":
    main()

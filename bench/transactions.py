"""Kafka transactions through the front (issue 58's aims), with confluent-kafka.

    .venv/bin/python bench/transactions.py [--repeat 3] [--txns 50] [--records 100000]

Each repeat starts a fresh local 3-node cluster serving Kafka with
``--kafka-transactions`` (R=2, SQLite epoch store) and measures:

- **commit**: ``--txns`` transactions in a row, each 100 records of 100 B
  over 3 topics (one partition each), timed from ``begin_transaction`` to
  the return of ``commit_transaction``; p50 and p99.  Aim: p50 <= 20 ms.
- **read_committed**: ``--records`` records of 100 B produced plainly to a
  topic, then read from the start by a read_committed consumer and by a
  read_uncommitted one (records/s each, in the same run).  Aim: the ratio
  >= 0.9.
- **big transaction**: 10,000 records of 100 B in one transaction
  (produce, then commit) against the same records from an idempotent
  producer (produce, then flush).  Aim: the ratio within 0.8-1.2.

The same cluster then runs logstrand's own client (``client.transaction``):
**native_commit** (the same transactions: ``append_batch`` of 34, 34 and 32
records to 3 logs at once, in a nursery, as a Kafka producer sends its
partitions' batches, then commit), **native_commit_serial** (the same, one
``append_batch`` after the other) and **native read** (``--records`` plain
records read to the tail with ``isolation="committed"`` and without: the
ratio, aim >= 0.9 as for Kafka).

Prints medians of the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _kafka_clients import consume, send  # noqa: E402 (bench/ on the path first)

PAYLOAD = b"x" * 100
BIG_TXN = 10_000


def _send(p: Any, topic: str, n: int) -> None:
    send(p, topic, PAYLOAD, n)


def _commits(bootstrap: str, txns: int) -> list[float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-commit"})
    p.init_transactions(30)
    took = []
    for _ in range(txns):
        t0 = time.perf_counter()
        p.begin_transaction()
        for topic in ("t1", "t2", "t3"):
            _send(p, topic, 34 if topic != "t3" else 32)
        p.commit_transaction(30)
        took.append(time.perf_counter() - t0)
    return took


def _big(bootstrap: str) -> tuple[float, float]:
    """Seconds for 10,000 records in one transaction, and idempotently."""
    from confluent_kafka import Producer

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-big"})
    txn.init_transactions(30)
    txn.begin_transaction()  # connected to the partition's leader, as the other is
    _send(txn, "big", 1)
    txn.commit_transaction(30)
    t0 = time.perf_counter()
    txn.begin_transaction()
    _send(txn, "big", BIG_TXN)
    txn.commit_transaction(60)
    in_txn = time.perf_counter() - t0
    idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    _send(idem, "big", 1)  # connected, with its producer id, as the other is
    assert idem.flush(30) == 0
    t0 = time.perf_counter()
    _send(idem, "big", BIG_TXN)
    assert idem.flush(60) == 0
    return in_txn, time.perf_counter() - t0


NATIVE_LOGS = range(900_001, 900_005)  # 3 for transactions, 1 plain


def _native(url: str, txns: int, records: int) -> dict[str, float]:
    import trio

    import logstrand
    from logstrand.client import RecordRun
    from logstrand.epochstore import LogAttributes, open_epoch_store

    with open_epoch_store(url) as store:
        store.create_logs(NATIVE_LOGS[0], NATIVE_LOGS[-1], LogAttributes(replication_factor=2))
    logs, plain = list(NATIVE_LOGS[:3]), NATIVE_LOGS[3]

    async def main() -> dict[str, float]:
        async with logstrand.open_client(url) as client:
            took: dict[bool, list[float]] = {True: [], False: []}
            for i in range(2 * txns):
                together = i % 2 == 0
                t0 = time.perf_counter()
                # (The nursery ends before the transaction: appends, then commit.)
                async with (
                    client.transaction("bench-native") as tx,
                    trio.open_nursery() as nursery,
                ):
                    for log, n in zip(logs, (34, 34, 32), strict=True):
                        if together:
                            nursery.start_soon(tx.append_batch, log, [PAYLOAD] * n)
                        else:
                            await tx.append_batch(log, [PAYLOAD] * n)
                took[together].append(time.perf_counter() - t0)
            for times in took.values():
                times.sort()
            for at in range(0, records, 1000):
                await client.append_batch(plain, [PAYLOAD] * min(1000, records - at))
            rates = {}
            for isolation in ("uncommitted", "committed"):
                t0 = time.perf_counter()
                n = 0
                async with client.read(plain, isolation=isolation) as reader:
                    async for batch in reader.batches():
                        n += sum(len(i) for i in batch if isinstance(i, RecordRun))
                assert n == records, (isolation, n)
                rates[isolation] = n / (time.perf_counter() - t0)
            return {
                "native_commit_p50_ms": 1000 * took[True][txns // 2],
                "native_commit_serial_p50_ms": 1000 * took[False][txns // 2],
                "native_read_ratio": rates["committed"] / rates["uncommitted"],
            }

    return trio.run(main)


def _one(txns: int, records: int) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from logstrand.testing import LocalCluster

    args = ("--kafka-transactions",)
    with (
        tempfile.TemporaryDirectory() as d,
        LocalCluster(f"{d}/c", nodes=3, kafka=True, node_args=args) as c,
    ):
        bootstrap = c.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(t, num_partitions=1) for t in ("t1", "t2", "t3", "plain", "big")]
        for future in admin.create_topics(topics).values():
            future.result(30)
        took = sorted(_commits(bootstrap, txns))
        plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        _send(plain, "plain", records)
        assert plain.flush(120) == 0
        uncommitted = consume(bootstrap, "plain", records, "read_uncommitted")
        committed = consume(bootstrap, "plain", records, "read_committed")
        in_txn, idempotent = _big(bootstrap)
        native = _native(c.url, txns, records)
    return {
        **native,
        "commit_p50_ms": 1000 * took[len(took) // 2],
        "commit_p99_ms": 1000 * took[min(len(took) - 1, int(len(took) * 0.99))],
        "read_uncommitted_rps": uncommitted,
        "read_committed_rps": committed,
        "read_ratio": committed / uncommitted,
        "big_txn_s": in_txn,
        "big_idempotent_s": idempotent,
        "big_ratio": in_txn / idempotent,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--txns", type=int, default=50)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = []
    for i in range(args.repeat):
        run = _one(args.txns, args.records)
        runs.append(run)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:,.3f}" for k, v in run.items()), flush=True)
    print("medians of", len(runs), "runs:")
    for key in runs[0]:
        print(f"  {key:24} {statistics.median(r[key] for r in runs):,.3f}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs}, indent=1))


if __name__ == "__main__":
    main()

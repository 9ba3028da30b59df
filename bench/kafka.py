"""The Kafka front with a real Kafka client, beside logstrand's own client and
Redis Streams in the same run.

    .venv/bin/python bench/kafka.py [--repeat 3] [--records 200000] [--big 20000]
                                    [--codec gzip|snappy|lz4|zstd]

Each repeat starts a fresh local 3-node cluster whose nodes serve Kafka (R=2,
SQLite epoch store) and runs, on one topic of one partition each:

- confluent-kafka (librdkafka) producing ``--records`` x 100 B with its
  default linger, then ``--big`` x 10 KiB; and logstrand's ``append_batch``
  of the same records in batches of 1,000, one in flight;
- a confluent-kafka consumer assigned from the beginning reading them back;
  and logstrand's ``read`` (one ``Record`` per record) over the same log;
- produce latency: 2,000 sequential produce + flush with acks=all and
  linger 0 against 2,000 sequential ``append``, p50 and p99;
- a consumer waiting at the end of 8 partitions (long polls): the nodes'
  CPU over 5 s, then produce -> consume latency of 50 records;
- with ``--codec``, the 100 B records again on a topic of that
  compression.type, consumed from the start: the front compresses every
  batch it sends, and the row gives the rate against the uncompressed topic's.

Redis Streams (``bench/kafka_redis.py``, from the peers' virtualenv that
``bench/compare.py`` installs) runs pipelined XADD and XRANGE backfill on the
same counts.  Prints medians of the repeats and the ratios the issue's aims
use.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _kafka_clients import consume, send  # noqa: E402 (bench/ on the path first)

SMALL = b"x" * 100
BIG = b"y" * 10240


def _produce(bootstrap: str, topic: str, payload: bytes, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    t0 = time.perf_counter()
    send(p, topic, payload, n)
    left = p.flush(120)
    assert left == 0, f"{left} messages not delivered"
    return n / (time.perf_counter() - t0)


def _latency(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce(topic, SMALL, partition=0)
        p.flush(30)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)]


def _waiting(bootstrap: str, pids: list[int]) -> tuple[float, float]:
    """A consumer waiting at the end of 8 partitions: the nodes' CPU (share
    of a core, summed) over 5 s of long polls, then produce -> consume p50
    (ms) of 50 records, each produced once the one before arrived."""
    import threading

    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    from logstrand.testing import cpu_s

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "w", "enable.auto.commit": False})
    c.assign([TopicPartition(f"wait{i}", 0, OFFSET_END) for i in range(8)])
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            c.poll(0.1)

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(3.0)
    c0, t0 = cpu_s(pids), time.monotonic()
    time.sleep(5.0)
    idle = (cpu_s(pids) - c0) / (time.monotonic() - t0)
    stop.set()
    t.join()
    times = []
    for i in range(50):
        t1 = time.perf_counter()
        p.produce("wait3", b"r%d" % i, partition=0)
        p.flush(10)
        m = None
        while m is None or m.error() is not None:
            m = c.poll(5)
        times.append((time.perf_counter() - t1) * 1000)
    c.close()
    return idle, sorted(times)[25]


def _ours(client: Any, log: int, payload: bytes, n: int) -> tuple[float, float]:
    from logstrand import Record

    t0 = time.perf_counter()
    for lo in range(0, n, 1000):
        client.append_batch(log, [payload] * min(1000, n - lo))
    produce = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    got = sum(1 for r in client.read(log) if isinstance(r, Record))
    consume = got / (time.perf_counter() - t0)
    assert got == n
    return produce, consume


def one_run(records: int, big: int, codec: str | None = None) -> dict[str, float]:
    import logstrand
    from logstrand.epochstore import LogAttributes, open_epoch_store
    from logstrand.kafka._topics import apply_configs
    from logstrand.testing import LocalCluster

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d, LocalCluster(f"{d}/c", nodes=3, kafka=True) as c:
        names = ["k100", "k10k", "klat", "n100", "n10k", "nlat"] + [f"wait{i}" for i in range(8)]
        with open_epoch_store(c.url) as store:
            for first, name in enumerate(names, 1):
                store.create_logs(first, first, LogAttributes(replication_factor=2), name=name)
            if codec is not None:
                packed = apply_configs(
                    LogAttributes(replication_factor=2), [("compression.type", codec)]
                )
                store.create_logs(100, 100, packed, name="kpacked")
        b = c.kafka_bootstrap
        pids = [p.pid for p in c.procs.values()]
        out["idle_cpu"], out["wait_p50_ms"] = _waiting(b, pids)
        out["kafka_produce_100b"] = _produce(b, "k100", SMALL, records)
        out["kafka_consume_100b"] = consume(b, "k100", records)
        if codec is not None:
            _produce(b, "kpacked", SMALL, records)
            out["kafka_consume_100b_packed"] = consume(b, "kpacked", records)
        out["kafka_produce_10kib"] = _produce(b, "k10k", BIG, big)
        out["kafka_consume_10kib"] = consume(b, "k10k", big)
        out["kafka_p50_ms"], out["kafka_p99_ms"] = _latency(b, "klat", 2000)
        with logstrand.connect(c.url) as client:
            out["own_produce_100b"], out["own_consume_100b"] = _ours(client, 4, SMALL, records)
            out["own_produce_10kib"], out["own_consume_10kib"] = _ours(client, 5, BIG, big)
            times = []
            for _ in range(2000):
                t0 = time.perf_counter()
                client.append(6, SMALL)
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            out["own_p50_ms"], out["own_p99_ms"] = times[1000], times[1980]
    return out


def redis_run(records: int, big: int) -> dict[str, float] | None:
    from compare import _ensure_peers

    python = _ensure_peers()
    if python is None:
        return None
    cmd = [python, str(HERE / "kafka_redis.py"), "--records", str(records), "--big", str(big)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--big", type=int, default=20_000)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--codec", choices=("gzip", "snappy", "lz4", "zstd"), default=None)
    args = ap.parse_args()
    runs = [one_run(args.records, args.big, args.codec) for _ in range(args.repeat)]
    peers = [r for r in (redis_run(args.records, args.big) for _ in range(args.repeat)) if r]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    red = {k: statistics.median(r[k] for r in peers) for k in peers[0]} if peers else {}
    print(f"3 nodes, R=2; medians of {len(runs)} runs (Redis: {len(peers)})\n")
    print("| case | Redis Streams | logstrand's client | Kafka front | front/Redis | front/own |")
    print("|---|---|---|---|---|---|")
    for what, key in (
        ("produce 100 B", "produce_100b"),
        ("consume 100 B from the start", "consume_100b"),
        ("produce 10 KiB", "produce_10kib"),
        ("consume 10 KiB from the start", "consume_10kib"),
    ):
        front, own, redis = med[f"kafka_{key}"], med[f"own_{key}"], red.get(key)
        rcell = "" if redis is None else f"{redis:,.0f} rec/s"
        rratio = "" if redis is None else f"{front / redis:.2f}x"
        print(
            f"| {what} | {rcell} | {own:,.0f} rec/s | {front:,.0f} rec/s | {rratio} "
            f"| {front / own:.2f}x |"
        )
    if args.codec:
        packed = med["kafka_consume_100b_packed"]
        print(
            f"| consume 100 B from the start, {args.codec} topic | | | {packed:,.0f} rec/s | "
            f"| {packed / med['kafka_consume_100b']:.2f}x of uncompressed |"
        )
    print(
        f"| produce, acks=all, linger 0: p50 / p99 | | {med['own_p50_ms']:.2f} / "
        f"{med['own_p99_ms']:.2f} ms | {med['kafka_p50_ms']:.2f} / {med['kafka_p99_ms']:.2f} ms "
        f"| | {med['kafka_p50_ms'] - med['own_p50_ms']:+.2f} ms |"
    )
    print(
        f"\nA consumer waiting at the end of 8 partitions: the nodes use "
        f"{med['idle_cpu']:.1%} of a core between them; a record produced then reaches it "
        f"in {med['wait_p50_ms']:.1f} ms (p50 of 50)."
    )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "redis": peers}, indent=1))


if __name__ == "__main__":
    main()

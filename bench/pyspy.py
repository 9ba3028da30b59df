"""Where the time goes in one workload of bench/compare.py, by py-spy.

    python bench/pyspy.py backfill-10k [--seconds 8] [--top 15]
    python bench/pyspy.py append-10k
    python bench/pyspy.py arrow-100b     # read_arrow, what each Spark task runs
    python bench/pyspy.py sequential-100b  # append one record, wait, again
    python bench/pyspy.py many-logs      # one record to each of 10,000 logs, again
    python bench/pyspy.py many-logs --inclusive  # shares with callees
    python bench/pyspy.py kafka-produce  # confluent-kafka producing 100 B through the front
    python bench/pyspy.py kafka-consume  # confluent-kafka consuming 100 B from the start
    python bench/pyspy.py kafka-consume-10k  # the same, 20,000 x 10 KiB

A local 3-node cluster (R=2) gets the workload's records; then the workload
runs again in a loop while ``py-spy record`` samples (at 200 Hz, native frames
off) the client process and every node for ``--seconds``.  For each process it
prints the functions with the most samples on top of the stack (self time) and
the share of all its samples, with the process's CPU use.  Needs py-spy in the
venv (``pip install py-spy``) and ptrace rights (root, or ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from logstrand.client import ColumnBatch, connect
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster, cpu_s

SIZE = 10 * 1024
WINDOW = 1000
MANY = 3_000


def _kafka(case: str, bootstrap: str, stop: threading.Event) -> int:
    """The Kafka front's cases, through confluent-kafka (``bench/kafka.py``)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    done = 0
    producer = Producer({"bootstrap.servers": bootstrap})
    big = case == "kafka-consume-10k"
    payload, total = (b"y" * SIZE, 20_000) if big else (b"x" * 100, 200_000)

    def produce(n: int) -> None:
        for _ in range(n):
            while True:
                try:
                    producer.produce("bench", payload, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(120)

    if case.startswith("kafka-consume"):
        produce(total)
    while not stop.is_set():
        if case == "kafka-produce":
            produce(10_000)
            done += 10_000
            continue
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "p", "enable.auto.commit": False})
        c.assign([TopicPartition("bench", 0, OFFSET_BEGINNING)])
        got = 0
        while got < total and not stop.is_set():
            got += sum(1 for m in c.consume(1000, 1.0) if m.error() is None)
        c.close()
        done += got
    return done


def _workload(case: str, url: str, stop: threading.Event) -> int:
    """Run ``case`` until ``stop``; records done."""
    done = 0
    payloads = [os.urandom(SIZE // 2).hex().encode() for _ in range(WINDOW)]
    with connect(url) as client:
        if case == "backfill-10k":
            for _ in range(10):
                client.append_batch(1, payloads)
        if case == "arrow-100b":
            pad = b"." * 88
            for lo in range(0, 200_000, 10_000):
                keys = [b"key-%d" % (i % 1000) for i in range(lo, lo + 10_000)]
                client.append_batch(
                    1, [b"%012d" % i + pad for i in range(lo, lo + 10_000)], keys=keys
                )
        if case == "many-logs":
            for log in range(1, MANY + 1):
                client.append_async(log, b"first")
            client.flush(600)
        while not stop.is_set():
            if case == "many-logs":
                for log in range(1, MANY + 1):
                    client.append_async(log, payloads[0][:100])
                client.flush(600)
                done += MANY
            elif case == "append-10k":
                client.append_batch(1, payloads)
                done += WINDOW
            elif case == "sequential-100b":
                client.append(1, payloads[0][:100])
                done += 1
            elif case == "arrow-100b":
                for rb in client.read_arrow(1, 0, client.tail_lsn(1)):
                    done += rb.num_rows
            else:
                for items in client.read_batches(1, 0, client.tail_lsn(1)):
                    done += len(ColumnBatch.of(1, items).lsn)
                    if stop.is_set():
                        break
    return done


def _stacks(raw: Path) -> collections.abc.Iterator[tuple[list[str], int]]:
    """(frames, samples) of each line of py-spy's raw output, outermost first."""
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            yield stack.split(";"), int(count)


def _top(raw: Path, n: int) -> list[tuple[str, float]]:
    """(frame, share of samples) with the most self samples, from py-spy's raw output."""
    counts: collections.Counter[str] = collections.Counter()
    for frames, c in _stacks(raw):
        counts[frames[-1]] += c
    total = sum(counts.values())
    return [(frame, c / total) for frame, c in counts.most_common(n)] if total else []


def _inclusive(raw: Path, n: int) -> list[tuple[str, float]]:
    """(function, share of samples with it anywhere on the stack), the most
    first: where a stage's time goes with everything it calls."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, c in _stacks(raw):
        total += c
        # A frame is "name (file:line)": each function once per stack.
        for name in {re.sub(r":\d+\)$", ")", frame) for frame in frames}:
            counts[name] += c
    return [(name, c / total) for name, c in counts.most_common(n)] if total else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "case",
        choices=(
            "backfill-10k",
            "append-10k",
            "arrow-100b",
            "sequential-100b",
            "many-logs",
            "kafka-produce",
            "kafka-consume",
            "kafka-consume-10k",
        ),
    )
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--inclusive", action="store_true", help="time with callees, not self time")
    args = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    kafka = args.case.startswith("kafka-")
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-profile-") as d,
        LocalCluster(Path(d) / "cluster", nodes=3, kafka=kafka) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, MANY, LogAttributes(replication_factor=2), name="bench")
        stop = threading.Event()
        result: list[int] = []

        def work() -> int:
            if kafka:
                return _kafka(args.case, cluster.kafka_bootstrap, stop)
            return _workload(args.case, cluster.url, stop)

        worker = threading.Thread(target=lambda: result.append(work()), daemon=True)
        worker.start()
        warms = {"many-logs": 30.0, "kafka-consume": 8.0, "kafka-consume-10k": 8.0}
        warm = warms.get(args.case, 3.0)
        time.sleep(warm)  # past the warm-up
        pids = {"client": os.getpid()} | {f"node {n}": p.pid for n, p in cluster.procs.items()}
        outs = {name: Path(d) / f"{name.replace(' ', '')}.txt" for name in pids}
        cpu0 = {name: cpu_s([pid]) for name, pid in pids.items()}
        spies = [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--rate",
                    "200",
                    "--duration",
                    str(int(args.seconds)),
                    "--format",
                    "raw",
                    "--output",
                    str(outs[name]),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, pid in pids.items()
        ]
        for s in spies:
            s.wait(timeout=args.seconds + 60)
        cpu = {name: (cpu_s([pid]) - cpu0[name]) / args.seconds for name, pid in pids.items()}
        stop.set()
        worker.join(timeout=60)
        print(f"{result[0] if result else 0:,} records in the run")
        for name in pids:
            print(f"\n## {name}: {cpu[name]:.0%} of a core\n")
            kind = "with callees" if args.inclusive else "self"
            print(f"| share of samples | function ({kind}) |")
            print("|---:|---|")
            top = _inclusive if args.inclusive else _top
            for frame, share in top(outs[name], args.top):
                print(f"| {share:.1%} | `{frame}` |")


if __name__ == "__main__":
    main()

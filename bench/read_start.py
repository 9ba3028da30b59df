"""How long a backfill waits for its first records: a fresh 3-node cluster
(R=2), one log filled with ``append_batch``, then ``read_batches`` over the
whole log, timing the first batch that holds records and the whole read.
Medians of ``--repeat`` reads for each case:

* 20,000 records of 100 B (2 MB);
* 2,000 records of 10 KiB (20 MB);
* 20,000 records of 10 KiB (200 MB).

    .venv/bin/python bench/read_start.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import logstrand
from logstrand.client import RecordRun
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

CASES = ((100, 20_000), (10_240, 2_000), (10_240, 20_000))
PER_APPEND = 100


def one_case(size: int, count: int, repeat: int) -> tuple[float, float]:
    """(first batch ms, whole read ms), medians of ``repeat`` reads."""
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp) / "c", nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2))
        with logstrand.connect(c.url) as client:
            for _ in range(count // PER_APPEND):
                client.append_batch(1, [b"x" * size] * PER_APPEND)
            tail = client.tail_lsn(1)
            firsts, wholes = [], []
            for _ in range(repeat):
                t0 = time.monotonic()
                first = None
                n = 0
                for batch in client.read_batches(1, 1, tail):
                    n += sum(len(item) for item in batch if isinstance(item, RecordRun))
                    if first is None and n:
                        first = time.monotonic() - t0
                assert n == count
                assert first is not None
                firsts.append(first * 1e3)
                wholes.append((time.monotonic() - t0) * 1e3)
    return statistics.median(firsts), statistics.median(wholes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'records':>20} {'first batch ms':>15} {'whole read ms':>14}")
    for size, count in CASES:
        first, whole = one_case(size, count, args.repeat)
        print(f"{f'{count:,} x {size:,} B':>20} {first:15.0f} {whole:14.0f}", flush=True)


if __name__ == "__main__":
    main()

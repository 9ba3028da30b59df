"""A compacted log with many distinct keys compacts, its offset map sent to
the nodes in parts, and ends holding the latest record of every key.

CI runs 8,000 keys with parts of 1,024 entries (8 parts); ``make soak``
runs 5,000,000 keys with the default parts (512 Ki entries, 10 parts), a map
over 3x the old 32 MiB frame that a map of 1.6 million keys once failed on
(``LOGSTRAND_COMPACTION_KEYS``, ``LOGSTRAND_COMPACTION_PART``)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

KEYS = int(os.environ.get("LOGSTRAND_COMPACTION_KEYS", "8000"))
PART = int(os.environ.get("LOGSTRAND_COMPACTION_PART", "1024"))
#: Keys written a second time: their first records are what the pass removes.
AGAIN = KEYS // 10
BATCH = 10_000


def _key(i: int) -> bytes:
    return b"user-%09d" % i


def _fill(client: logstrand.Client, log: int) -> None:
    """Every key once (value b"1"), then the first tenth again (value b"2")."""
    for lo in range(0, KEYS + AGAIN, BATCH):
        ids = range(lo, min(KEYS + AGAIN, lo + BATCH))
        keys: list[bytes | None] = [_key(i if i < KEYS else i - KEYS) for i in ids]
        values = [b"1" if i < KEYS else b"2" for i in ids]
        client.append_batch(log, values, keys=keys)


def test_a_log_of_many_distinct_keys_compacts_in_parts(tmp_path: Path) -> None:
    # A map with room for every key in one pass (24 bytes a slot, 90% full).
    map_bytes = int(KEYS / 0.9 + 2) * 24
    args = (
        "--compaction-interval",
        "0",
        "--compaction-map",
        str(map_bytes),
        "--compaction-drop-entries",
        str(PART),
    )
    with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2, cleanup_policy="compact"))
        settings = logstrand.ClientSettings(append_timeout_s=120.0)
        with logstrand.connect(c.url, settings=settings) as client:
            t0 = time.monotonic()
            _fill(client, 1)
            filled = time.monotonic() - t0
            t0 = time.monotonic()
            stats = client.compact(1, timeout_s=3600.0)
            took = time.monotonic() - t0
            print(
                f"{KEYS:,} keys: filled in {filled:.0f} s, one pass in {took:.0f} s, "
                f"{stats['parts']} parts; {stats}"
            )
            assert not stats["partial"]
            assert stats["keys"] == KEYS
            assert stats["parts"] == -(-KEYS // PART)
            assert stats["records_removed"] == AGAIN
            seen = np.zeros(KEYS, dtype=np.uint8)
            for batch in client.read_columns(1):
                for key, payload in zip(batch.keys, batch.payloads, strict=True):
                    assert key is not None
                    assert payload is not None
                    i = int(key[5:])
                    assert seen[i] == 0, f"{key!r} read twice"
                    seen[i] = int(payload)
    assert int((seen[:AGAIN] == 2).sum()) == AGAIN
    assert int((seen[AGAIN:] == 1).sum()) == KEYS - AGAIN


def test_a_pass_longer_than_the_idle_timeout_still_answers(tmp_path: Path) -> None:
    """The connection waiting for a COMPACT is not idle while the pass runs:
    a 5-million-key pass outlasted the node's idle cut (600 s), the node
    closed the connection and the pass's answer was lost."""
    args = (
        "--compaction-interval",
        "0",
        "--idle-timeout",
        "1",
        "--compaction-io-rate",
        "20KiB",
    )
    with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 1, LogAttributes(replication_factor=2, cleanup_policy="compact"))
        with logstrand.connect(c.url) as client:
            for _ in range(2):
                keys: list[bytes | None] = [_key(i) for i in range(300)]
                client.append_batch(1, [b"v" * 100] * 300, keys=keys)
            t0 = time.monotonic()
            stats = client.compact(1)
            took = time.monotonic() - t0
    assert took > 2.0  # the throttle made it outlast the 1 s idle cut
    assert stats["records_removed"] == 300

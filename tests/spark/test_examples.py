"""The examples in examples/ run, in the test session's Spark, against a real cluster."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import logstrand

if TYPE_CHECKING:
    from types import ModuleType

    from logstrand.testing import LocalCluster

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_to_parquet(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    keys = [b"user-%d" % (i % 13) for i in range(3000)]
    with logstrand.connect(cluster.url) as client:
        client.append_batch(60, [b"x" * (i % 50) for i in range(3000)], keys=keys)
        client.append_batch(61, [b"y"] * 10, keys=[b"solo"] * 10)
    got = example("replay_to_parquet").replay(spark, cluster.url, "60-61", str(tmp_path))
    assert got == {"records": 3010, "keys": 14}
    by_key = {
        (r.log_id, bytes(r.key)): (r.records, r.payload_bytes)
        for r in spark.read.parquet(str(tmp_path / "by_key")).collect()
    }
    assert by_key[61, b"solo"] == (10, 10)
    assert by_key[60, b"user-0"] == (231, sum(i % 50 for i in range(0, 3000, 13)))
    assert spark.read.parquet(str(tmp_path / "records")).count() == 3010


def test_streaming_counts_restart(
    spark: Any, cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = example("streaming_counts")
    words = [b"a", b"b", b"b", b"c", b"c", b"c"]

    def counts() -> dict[bytes, int]:
        rows = spark.read.parquet(str(tmp_path / "counts")).collect()
        return {bytes(r.key): r["count"] for r in rows}

    with logstrand.connect(cluster.url) as client:
        client.append_batch(62, [b"."] * 600, keys=words * 100)
    mod.run(spark, cluster.url, 62, str(tmp_path))
    assert counts() == {b"a": 100, b"b": 200, b"c": 300}
    with logstrand.connect(cluster.url) as client:
        client.append_batch(62, [b"."] * 4, keys=[b"a", b"d", b"d", b"d"])
    mod.run(spark, cluster.url, 62, str(tmp_path))  # from the checkpoint
    assert counts() == dict(Counter(words * 100 + [b"a", b"d", b"d", b"d"]))
    # What `--once` prints: the totals, then the busiest keys.
    mod.print_counts(spark, str(tmp_path))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "604 records, 4 keys; the busiest:"
    assert lines[1].split() == ["300", "c"]

"""The pipeline on a real distributed Spark: a standalone master and two
workers, started with the pyspark package's own ``bin/spark-class``, each on
a host of its own (network namespaces), run ``examples/replay_to_parquet.py``
and ``examples/streaming_counts.py`` against a logstrand cluster on three
other hosts.  The executors reach the nodes and ZooKeeper by the addresses
the cluster advertises, as on separate machines (docs/spark.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import logstrand
from logstrand.testing import zookeeper_available
from logstrand.testing._netcluster import NetCluster
from logstrand.testing._netns import available

pytestmark = [
    # Four JVMs on two cores: over two minutes, a tenth of the suite's time.
    # ``make faults`` runs it (with the other runs across hosts); CI does not.
    pytest.mark.skipif(
        os.environ.get("LOGSTRAND_SPARK_CLUSTER") != "1",
        reason="a standalone Spark cluster across hosts: make faults (LOGSTRAND_SPARK_CLUSTER=1)",
    ),
    pytest.mark.skipif(available() is not None, reason=f"{available()} (hosts)"),
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEYS = 40


def _wait_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing on {host}:{port} after {timeout_s} s")


def _alive_workers(master: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{master}:8080/json/", timeout=2) as resp:
            doc = json.load(resp)
    except OSError:
        return 0
    return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")


def test_examples_on_a_standalone_spark_cluster_across_hosts(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = str(spark_home / "bin" / "spark-class")
    with NetCluster(tmp_path / "c", nodes=3, extra_hosts=("spark", "w1", "w2")) as c:
        c.cli("logs", "create", "1..2", "--replication", "2")
        with logstrand.connect(c.url) as client:
            for log in (1, 2):
                for i in range(10):
                    client.append_batch(
                        log,
                        [b"v%d" % j for j in range(200)],
                        keys=[b"k%d" % ((i * 200 + j) % KEYS) for j in range(200)],
                    )
        net = c.net
        master = net.address("spark")
        # Each JVM binds to its own host's address (the Spark conftest sets
        # SPARK_LOCAL_IP=127.0.0.1 for the local session: not here).
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": master,
            "SPARK_HOME": str(spark_home),
            "SPARK_LOG_DIR": str(tmp_path / "spark-logs"),
            "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local"),
            "PYSPARK_PYTHON": sys.executable,
        }
        net.spawn(
            "spark",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", master,
             "--port", "7077", "--webui-port", "8080"],
            tmp_path / "master.log",
            env,
        )  # fmt: skip
        _wait_port(master, 7077, 120)
        for w in ("w1", "w2"):
            net.spawn(
                w,
                [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://{master}:7077",
                 "--host", net.address(w), "--cores", "1", "--memory", "1g",
                 "--work-dir", str(tmp_path / w)],
                tmp_path / f"{w}.log",
                {**env, "SPARK_LOCAL_IP": net.address(w)},
            )  # fmt: skip
        deadline = time.monotonic() + 180  # JVMs start slowly beside the other tests
        while _alive_workers(master) < 2:
            assert time.monotonic() < deadline, "the workers did not register"
            time.sleep(0.5)
        # One driver, here in the root namespace (the bridge's address), runs
        # both examples' jobs: one JVM less to start than two scripts.
        driver = f"{net.subnet}.1"
        code = f"""
import sys
sys.path.insert(0, {str(EXAMPLES)!r})
from pyspark.sql import SparkSession
import replay_to_parquet, streaming_counts
spark = (SparkSession.builder.master("spark://{master}:7077")
    .config("spark.driver.host", "{driver}").config("spark.driver.bindAddress", "{driver}")
    .config("spark.pyspark.python", sys.executable)
    .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
    .config("spark.sql.shuffle.partitions", "4").getOrCreate())
print(replay_to_parquet.replay(spark, {c.url!r}, "1-2", {str(tmp_path / "replay")!r}))
streaming_counts.run(spark, {c.url!r}, 1, {str(tmp_path / "counts")!r}, once=True)
spark.stop()
"""
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "SPARK_LOCAL_IP": driver},
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"'records': 4000, 'keys': {2 * KEYS}" in done.stdout, done.stdout
        counts = pq.read_table(tmp_path / "counts" / "counts").to_pydict()
        assert sum(counts["count"]) == 2000
        assert len(counts["key"]) == KEYS
    # The tasks ran on the workers' hosts: each has an executor's directory.
    ran = [w for w in ("w1", "w2") if any((tmp_path / w).glob("app-*/*/stderr"))]
    assert ran == ["w1", "w2"]

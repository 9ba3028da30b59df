"""One local SparkSession for every Spark test (it takes seconds to start), and
one real 3-node cluster for the module's tests."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if shutil.which("java") is None:
        if os.environ.get("CI"):
            pytest.fail("java is not installed; `make test` installs it when run as root")
        pytest.skip("java is not installed (Debian package default-jre-headless)")
    from pyspark.sql import SparkSession

    import logstrand.spark

    # Python workers must be this interpreter (the venv's, with pyarrow and
    # logstrand), and every Spark server binds to loopback.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    session = (
        SparkSession.builder.master("local[2,2]")  # a failed task runs once more
        .appName("logstrand-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    logstrand.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Logs 1..99 with R=2 on three real node processes."""
    with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 99, LogAttributes(replication_factor=2))
        yield c

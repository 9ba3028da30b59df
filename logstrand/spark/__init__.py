"""The PySpark data source ``logstrand``: batch reads (backfill, replay), writes
and streaming reads of logstrand logs, with Arrow batches both ways.

    import logstrand.spark
    logstrand.spark.register(spark)
    df = (spark.read.format("logstrand")
          .option("url", "sqlite:///path/cluster.db").option("logs", "1,5-9").load())

Needs the ``spark`` extra (pyspark, pyarrow, pandas < 3).  See docs/spark.md.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from ._source import (
    LOG_SCHEMA,
    DataLossError,
    LogstrandDataSource,
    LogstrandReader,
    LogstrandStreamReader,
    LsnRange,
)
from ._writer import LogstrandStreamWriter, LogstrandWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger("logstrand.spark")


def register(spark: SparkSession) -> None:
    """Make ``format("logstrand")`` and ``USING logstrand`` known to a session.

    When nothing names the Python of Spark's workers (neither
    ``PYSPARK_PYTHON`` nor ``spark.pyspark.python``), they would start
    ``python3`` from PATH, which may not have logstrand (an import error deep
    in a Py4J trace): they run this interpreter instead.
    """
    sc = spark.sparkContext
    named = os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python")
    if not named and sc.pythonExec != sys.executable:
        _log.info("Spark's Python workers run %s (PYSPARK_PYTHON is not set)", sys.executable)
        sc.pythonExec = sys.executable
    spark.dataSource.register(LogstrandDataSource)


__all__ = [
    "LOG_SCHEMA",
    "DataLossError",
    "LogstrandDataSource",
    "LogstrandReader",
    "LogstrandStreamReader",
    "LogstrandStreamWriter",
    "LogstrandWriter",
    "LsnRange",
    "register",
]

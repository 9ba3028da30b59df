"""The PySpark data source ``logstrand``: batch reads (backfill, replay), writes
and streaming reads of logstrand logs, with Arrow batches both ways.

    import logstrand.spark
    logstrand.spark.register(spark)
    df = (spark.read.format("logstrand")
          .option("url", "sqlite:///path/epochs.db").option("logs", "1,5-9").load())

Needs the ``spark`` extra (pyspark, pyarrow, pandas < 3).  See docs/spark.md.
"""

from __future__ import annotations

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


def register(spark: SparkSession) -> None:
    """Make ``format("logstrand")`` and ``USING logstrand`` known to a session."""
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

"""The data source's writers: every row appended, exactly once per task.

Each write task appends under a producer id derived from the write and its
partition (``producers.derived_id``), with the client's idempotent appends:
a task that Spark runs again (a retry, a speculative copy) numbers the same
batches the same way, so the sequencer answers the batches the log already
holds with their LSNs, or with DUPLICATE when they are too old to be
remembered, and stores only what is new.  That needs the same rows in the
same order on every attempt, which Spark gives for a deterministic input
(docs/spark.md says which failures are covered).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..client import ClientSettings, connect
from ..errors import DuplicateAppendError, InvalidArgumentError
from ..idempotence import derived_id
from ._arrow import rows_by_log

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

    from ._options import WriteOptions

_log = logging.getLogger("logstrand.spark")


@dataclass(frozen=True)
class Appended(WriterCommitMessage):
    """What one write task appended: per log, (records, first LSN, last LSN)
    of what this attempt stored or found stored; and how many records it
    found stored too long ago to learn their LSNs (``duplicates``)."""

    logs: dict[int, tuple[int, int, int]]
    duplicates: int = 0


def _task() -> tuple[int, str | None, str | None]:
    """This task's partition, and the streaming query id and micro-batch id
    (None outside a stream)."""
    tc = TaskContext.get()
    if tc is None:
        raise InvalidArgumentError("the logstrand writer runs only inside a Spark task")
    return (
        tc.partitionId(),
        tc.getLocalProperty("sql.streaming.queryId"),
        tc.getLocalProperty("streaming.sql.batchId"),
    )


def append_rows(
    opts: WriteOptions, producer_id: int, batches: Iterator[pa.RecordBatch]
) -> Appended:
    """Append the rows under ``producer_id``, one APPEND per call (its body
    packed from the Arrow buffers: ``append_arrow``), so that a batch found
    too old to answer (DUPLICATE) skips only itself."""
    settings = ClientSettings(producer_id=producer_id)
    done: dict[int, tuple[int, int, int]] = {}
    duplicates = 0
    with connect(opts.url, settings=settings, credentials=opts.auth.credentials()) as client:
        for batch in batches:
            for log, rows in rows_by_log(batch, opts.log).items():
                for start, end in rows.spans(settings):
                    try:
                        lsns = client.append_arrow(log, rows.span(start, end))
                    except DuplicateAppendError:
                        duplicates += end - start
                        continue
                    n, first, _ = done.get(log, (0, int(lsns[0]), 0))
                    done[log] = (n + len(lsns), first, int(lsns[-1]))
    return Appended(done, duplicates)


def _total(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    appended = [m for m in messages if isinstance(m, Appended)]
    return sum(n for m in appended for n, _, _ in m.logs.values()), sum(
        m.duplicates for m in appended
    )


class LogstrandWriter(DataSourceArrowWriter):
    """A batch write: producer ids derived from the write's id and the partition."""

    def __init__(self, opts: WriteOptions, write_id: str) -> None:
        self.opts = opts
        self.write_id = write_id

    def producer_id(self, partition: int) -> int:
        return derived_id("logstrand-write", self.write_id, partition)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Appended:
        partition, _, _ = _task()
        return append_rows(self.opts, self.producer_id(partition), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total, old = _total(messages)
        _log.info(
            "write %s: %d records appended (%d found stored before)", self.write_id, total, old
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # What was appended stays; the same write run again (same writeId)
        # appends only what is missing.
        total, _ = _total(messages)
        _log.warning(
            "write %s aborted after %d records were appended (they stay)", self.write_id, total
        )


class LogstrandStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: producer ids derived from the query (its id, kept in
    the checkpoint across restarts), the micro-batch and the partition, so a
    micro-batch that Spark runs again after a failure appends nothing twice."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Appended:
        partition, query, batch = _task()
        if batch is None:
            raise InvalidArgumentError("the stream writer runs only inside a streaming query")
        name = self.opts.write_id or query or "query"
        producer = derived_id("logstrand-stream", name, batch, partition)
        return append_rows(self.opts, producer, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total, old = _total(messages)
        _log.info(
            "micro-batch %d: %d records appended (%d found stored before)", batchId, total, old
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total, _ = _total(messages)
        _log.warning("micro-batch %d aborted after %d records were appended", batchId, total)

"""The data source's writers: every row appended, exactly once per task.

Each write task appends under a producer id derived from the write and its
partition (``producers.derived_id``), with the client's idempotent appends:
a task that Spark runs again (a retry, a speculative copy) numbers the same
batches the same way, so the sequencer answers the batches the log already
holds with their LSNs, or with DUPLICATE when they are too old to be
remembered, and stores only what is new.  That needs the same rows in the
same order on every attempt, which Spark gives for a deterministic input
(docs/spark.md says which failures are covered).

With ``transactionalId`` the rows go in transactions instead, committed
by the driver (two-phase, as Flink's Kafka sink does): each task writes
its rows in a transaction of id ``<transactionalId>-<partition>`` and
leaves it open (``prepare``); the driver commits every task's when the
write or micro-batch commits, with the write's id or the query's id and
the batch's number as the commit's tag, and aborts them when it aborts.  Committed readers see
none of it before, and each task's part at its commit.  A task run again
starts the id's producer at a new epoch, which aborts what an earlier
attempt left open; a micro-batch run again (the driver died before Spark
recorded it) finds the tag of its batch on the ids the driver had
committed, and writes nothing for those.
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

from ..client import ClientSettings, Prepared, connect
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


@dataclass(frozen=True)
class TxnWritten(WriterCommitMessage):
    """What one write task wrote in its transaction: left open for the
    driver (``prepared``; None: nothing to commit, or an earlier run of the
    same write or batch committed it already, ``done``)."""

    prepared: Prepared | None
    records: int
    #: What the driver commits it as: the write's id, or the query's and
    #: the micro-batch's (a query started afresh numbers from 0 again).
    tag: str = ""
    done: bool = False


#: An id whose last commit is one of these has committed its tag.
_COMMITTED = ("PrepareCommit", "CompleteCommit")


def write_in_transaction(
    opts: WriteOptions, txn_id: str, tag: str, batches: Iterator[pa.RecordBatch]
) -> TxnWritten:
    """The rows in a transaction of ``txn_id``, left open; nothing when the
    id's last commit has ``tag`` (this part was committed by an earlier run)."""
    settings = ClientSettings()
    with connect(opts.url, credentials=opts.auth.credentials()) as client:
        state = client.transaction_state(txn_id)
        if state is not None and state.get("tag") == tag and state["state"] in _COMMITTED:
            _log.info("%s: committed as %s already: nothing written", txn_id, tag)
            return TxnWritten(None, 0, tag, done=True)
        n = 0
        with client.transaction(txn_id, timeout_s=opts.transaction_timeout_s) as tx:
            for batch in batches:
                for log, rows in rows_by_log(batch, opts.log).items():
                    rows.check(settings)
                    for start, end in rows.spans(settings):
                        part = rows.span(start, end)
                        keys = part.column("key").to_pylist() if rows.keys is not None else None
                        tx.append_batch(log, part.column("payload").to_pylist(), keys=keys)
                        n += end - start
            prepared = tx.prepare()
    return TxnWritten(prepared, n, tag)


def end_transactions(
    opts: WriteOptions, messages: list[WriterCommitMessage | None], *, commit: bool
) -> int:
    """The driver's part: commit (with each one's tag) or abort every
    task's transaction; the records committed."""
    written = [m for m in messages if isinstance(m, TxnWritten) and m.prepared is not None]
    if not written:
        return 0
    with connect(opts.url, credentials=opts.auth.credentials()) as client:
        for m in written:
            assert m.prepared is not None
            if commit:
                client.commit_prepared(m.prepared, tag=m.tag)
            else:
                client.abort_prepared(m.prepared)
    return sum(m.records for m in written)


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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Appended | TxnWritten:
        partition, _, _ = _task()
        if self.opts.transactional_id is not None:
            txn_id = f"{self.opts.transactional_id}-{partition}"
            return write_in_transaction(self.opts, txn_id, self.write_id, iterator)
        return append_rows(self.opts, self.producer_id(partition), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.transactional_id is not None:
            n = end_transactions(self.opts, messages, commit=True)
            _log.info("write %s: %d records committed", self.write_id, n)
            return
        total, old = _total(messages)
        _log.info(
            "write %s: %d records appended (%d found stored before)", self.write_id, total, old
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.transactional_id is not None:
            n = end_transactions(self.opts, messages, commit=False)
            _log.warning("write %s aborted: %d records never visible", self.write_id, n)
            return
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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Appended | TxnWritten:
        partition, query, batch = _task()
        if batch is None:
            raise InvalidArgumentError("the stream writer runs only inside a streaming query")
        if self.opts.transactional_id is not None:
            txn_id = f"{self.opts.transactional_id}-{partition}"
            tag = f"{query} batch {batch}"
            return write_in_transaction(self.opts, txn_id, tag, iterator)
        name = self.opts.write_id or query or "query"
        producer = derived_id("logstrand-stream", name, batch, partition)
        return append_rows(self.opts, producer, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.transactional_id is not None:
            n = end_transactions(self.opts, messages, commit=True)
            _log.info("micro-batch %d: %d records committed", batchId, n)
            return
        total, old = _total(messages)
        _log.info(
            "micro-batch %d: %d records appended (%d found stored before)", batchId, total, old
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.transactional_id is not None:
            n = end_transactions(self.opts, messages, commit=False)
            _log.warning("micro-batch %d aborted: %d records never visible", batchId, n)
            return
        total, _ = _total(messages)
        _log.warning("micro-batch %d aborted after %d records were appended", batchId, total)

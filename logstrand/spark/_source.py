"""The ``logstrand`` data source on PySpark's Python Data Source API.

Where each part runs matters (Spark's own split): ``partitions()`` and the
stream reader's offset calls run in a long-lived Python process on the
driver; ``read()`` and the writer's ``write()`` run in Python workers on the
executors, with a pickled copy of the reader or writer.  Everything
``read()`` needs travels in the ``LsnRange`` partition.  Each task opens its
own blocking client (the executors must reach the epoch store URL).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..client import connect
from ..errors import InvalidArgumentError, LogstrandError
from ..types import LSN_OLDEST, Gap, GapType, format_lsn, lsn_epoch
from . import _plan
from ._options import (
    LATEST,
    NO_AUTH,
    Auth,
    ReadOptions,
    WriteOptions,
    parse_string_columns,
)
from ._writer import LogstrandStreamWriter, LogstrandWriter

if TYPE_CHECKING:
    from collections.abc import Iterator, MutableMapping, Sequence

    import pyarrow as pa

    from ..client import Client

_log = logging.getLogger("logstrand.spark")

#: The rows of a read (``client.ARROW_SCHEMA`` is the same, as Arrow).
LOG_SCHEMA = StructType(
    [
        StructField("log_id", LongType(), nullable=False),
        StructField("lsn", LongType(), nullable=False),
        StructField("epoch", IntegerType(), nullable=False),
        StructField("esn", LongType(), nullable=False),
        StructField("timestamp", TimestampType(), nullable=False),
        StructField("key", BinaryType(), nullable=True),
        StructField("payload", BinaryType(), nullable=True),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [
                        StructField("key", StringType(), nullable=False),
                        StructField("value", BinaryType(), nullable=True),
                    ]
                ),
                containsNull=False,
            ),
            nullable=True,
        ),
        StructField("create_time", TimestampType(), nullable=True),
    ]
)


_LOSS = (GapType.DATALOSS, GapType.TRIM, GapType.CHECKSUM_FAIL)


@dataclass(frozen=True)
class LsnRange(InputPartition):
    """One Spark partition: LSNs ``lo`` (included) to ``hi`` (excluded) of a log."""

    url: str
    log_id: int
    lo: int
    hi: int
    fail_on_data_loss: bool
    auth: Auth = NO_AUTH
    #: Columns read as UTF-8 strings (``stringColumns``).
    strings: frozenset[str] = frozenset()
    #: "committed": the committed records of the range only; its read goes
    #: on past ``hi`` until the transactions open there are decided.
    isolation: str = "uncommitted"


def read_schema(strings: frozenset[str]) -> StructType:
    """``LOG_SCHEMA`` with the columns of ``strings`` as strings."""
    if not strings:
        return LOG_SCHEMA
    return StructType(
        [
            StructField(f.name, StringType(), f.nullable) if f.name in strings else f
            for f in LOG_SCHEMA.fields
        ]
    )


# -- planning (driver) ----------------------------------------------------------------


def resolve_ranges(client: Client, opts: ReadOptions) -> dict[int, tuple[int, int]]:
    """Each log's ``[start, end)`` as the options say, against the log as it is now."""
    out: dict[int, tuple[int, int]] = {}
    for log in opts.logs:
        tail = client.tail_lsn(log)
        out[log] = (start_of(client, opts, log, tail), end_of(client, opts, log, tail))
    return out


def start_of(client: Client, opts: ReadOptions, log: int, tail: int) -> int:
    if opts.starting_timestamp_ms is not None:
        return client.find_time(log, opts.starting_timestamp_ms)
    if isinstance(opts.starting, dict) and log in opts.starting:
        return max(LSN_OLDEST, opts.starting[log])
    if opts.starting == LATEST:
        return tail + 1
    # earliest (also for a log the JSON leaves out)
    return max(LSN_OLDEST, client.trim_point(log) + 1)


def end_of(client: Client, opts: ReadOptions, log: int, tail: int) -> int:
    if opts.ending_timestamp_ms is not None:
        return min(client.find_time(log, opts.ending_timestamp_ms), tail + 1)
    if isinstance(opts.ending, dict) and log in opts.ending:
        return min(opts.ending[log], tail + 1)
    return tail + 1


def plan_partitions(client: Client, opts: ReadOptions) -> list[LsnRange]:
    ranges = resolve_ranges(client, opts)
    segments = {log: client.log_directory(log) for log, (lo, hi) in ranges.items() if hi > lo}
    copies = {log: _copies(client, log) for log in segments}

    def extents(log: int, lo: int, hi: int) -> dict[int, int]:
        """Where recovery ended each epoch before the last (bridge ESN)."""
        first, last = lsn_epoch(lo), lsn_epoch(hi - 1)
        if last - first > _plan.EPOCHS_MAX:
            return {}
        out = {}
        for e in range(first, last):
            end = client.epoch_end(log, e)
            if end is not None and end.bridge_esn > 0:
                out[e] = end.bridge_esn
        return out

    planned = _plan.plan(
        ranges,
        segments,
        copies,
        min_partitions=opts.min_partitions,
        max_records=opts.max_records_per_partition,
        extents=extents,
    )
    return [
        LsnRange(
            opts.url,
            r.log_id,
            r.lo,
            r.hi,
            opts.fail_on_data_loss,
            opts.auth,
            opts.string_columns,
            opts.isolation,
        )
        for r in planned
    ]


def _copies(client: Client, log: int) -> int:
    return client.log_attributes(log).replication_factor


# -- reading (executors) ----------------------------------------------------------------


class DataLossError(LogstrandError):
    """Records a query was to read are gone (failOnDataLoss=true)."""


def read_range(client: Client, part: LsnRange) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches (``client.read_arrow``); gaps
    of lost records fail the read (``failOnDataLoss``) or are skipped and
    logged with their count."""
    if part.hi <= part.lo:
        return
    lost = 0

    def on_gap(gap: Gap) -> None:
        nonlocal lost
        if gap.type not in _LOSS:
            return
        what = (
            f"log {part.log_id}: {gap.type.name} gap "
            f"{format_lsn(gap.lo)}..{format_lsn(gap.hi)} in the range read"
        )
        if part.fail_on_data_loss:
            raise DataLossError(f"{what} (records are gone; set failOnDataLoss=false to skip them)")
        _log.warning("%s: skipped", what)
        lost += 1

    batches = client.read_arrow(
        part.log_id, part.lo, part.hi - 1, on_gap=on_gap, isolation=part.isolation
    )
    if not part.strings:
        yield from batches
    else:
        for batch in batches:
            yield as_strings(batch, part.strings, part.log_id)
    if lost:
        _log.warning("log %d: %d gaps of lost records skipped", part.log_id, lost)


def as_strings(batch: pa.RecordBatch, names: frozenset[str], log_id: int) -> pa.RecordBatch:
    """``batch`` with the binary columns ``names`` as UTF-8 strings (checked:
    bytes that are not UTF-8 fail the read, naming the log and the column)."""
    import pyarrow as pa

    schema = batch.schema
    columns = list(batch.columns)
    for i, field in enumerate(schema):
        if field.name in names:
            try:
                columns[i] = columns[i].cast(pa.string())
            except pa.ArrowInvalid:
                raise InvalidArgumentError(
                    f"log {log_id}: a {field.name} is not UTF-8 (stringColumns={field.name}); "
                    "read it as bytes"
                ) from None
            # The field keeps its name and nullability: Spark checks both.
            schema = schema.set(i, field.with_type(pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _read(part: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(part, LsnRange):
        # Nothing to read (every log empty): the plan had no partition, and
        # PySpark then reads one of its own, InputPartition(None).
        return
    with connect(part.url, credentials=part.auth.credentials()) as client:
        yield from read_range(client, part)


class LogstrandReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        with connect(self.opts.url, credentials=self.opts.auth.credentials()) as client:
            return plan_partitions(client, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


# -- streaming -------------------------------------------------------------------------


def take(client: Client, log: int, lo: int, hi: int, budget: int) -> tuple[int, int]:
    """Where the first ``budget`` records from ``lo`` end (excluded, at most
    ``hi``), and how many records that is at most."""
    if hi <= lo or budget <= 0:
        return lo, 0
    if lsn_epoch(lo) == lsn_epoch(hi - 1):
        # Dense ESNs: an LSN holds at most one record, so LSNs bound records.
        end = min(hi, lo + budget)
        return end, end - lo
    # Across epochs LSNs jump by 2^32: count the records themselves.
    seen = 0
    for batch in client.read_columns(log, lo, hi - 1):
        if seen + len(batch) >= budget:
            return batch.lsns[budget - seen - 1] + 1, budget
        seen += len(batch)
    return hi, seen


class LogstrandStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"<log id>": next LSN}``: the first LSN the next batch reads."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._client: Client | None = None
        self._frozen: dict[int, int] | None = None
        self._committed: dict[int, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader for the executors: the driver's client (a
        # thread and sockets) stays behind; ``read`` opens its own.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = connect(self.opts.url, credentials=self.opts.auth.credentials())
        return self._client

    def initialOffset(self) -> dict[str, int]:
        # Not the group's position: Spark asks for this again to run batch 0
        # once more after a failure, and it must give the same answer then.
        c = self.client
        return {str(log): start_of(c, self.opts, log, c.tail_lsn(log)) for log in self.opts.logs}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        c = self.client
        self._frozen = {log: c.tail_lsn(log) + 1 for log in self.opts.logs}

    def _ends(self) -> dict[int, int]:
        if self._frozen is not None:
            return self._frozen
        return {log: self.client.tail_lsn(log) + 1 for log in self.opts.logs}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        self._commit_group(start)
        starts = {log: int(start.get(str(log), LSN_OLDEST)) for log in self.opts.logs}
        ends = {log: max(starts[log], e) for log, e in self._ends().items()}
        if not isinstance(limit, ReadMaxRows):
            return {str(log): ends[log] for log in self.opts.logs}
        # Records, not LSNs: an even share per log, then what the others left.
        budget = limit.max_rows
        out = dict(starts)
        active = [log for log in self.opts.logs if ends[log] > starts[log]]
        while budget > 0 and active:
            each = max(1, budget // len(active))
            still = []
            for log in active:
                if budget <= 0:
                    break
                out[log], taken = take(self.client, log, out[log], ends[log], min(each, budget))
                budget -= taken
                if out[log] < ends[log]:
                    still.append(log)
            active = still
        return {str(log): out[log] for log in self.opts.logs}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        parts = []
        for log in self.opts.logs:
            lo, hi = int(start.get(str(log), LSN_OLDEST)), int(end.get(str(log), LSN_OLDEST))
            if hi > lo:
                parts.append(
                    LsnRange(
                        self.opts.url,
                        log,
                        lo,
                        hi,
                        self.opts.fail_on_data_loss,
                        self.opts.auth,
                        self.opts.string_columns,
                        self.opts.isolation,
                    )
                )
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, int]) -> None:
        # The log keeps everything; trimming is the operator's call.
        self._commit_group(end)

    def _commit_group(self, done: dict[str, int]) -> None:
        """Every micro-batch up to ``done`` is processed: commit that to the
        group, if any, so that ``logstrand groups describe`` shows the query's
        lag.  Spark calls ``commit`` for a batch only when it plans the one
        after, so ``latestOffset`` commits its ``start`` too: Spark asks for it
        once the batch before has finished (also after the last batch of an
        ``availableNow`` query, to see whether more came)."""
        group = self.opts.group
        if group is None:
            return
        for log in self.opts.logs:
            lsn = int(done.get(str(log), LSN_OLDEST)) - 1
            if lsn < LSN_OLDEST or self._committed.get(log) == lsn:
                continue
            try:
                self.client.commit(group, log, lsn)
            except LogstrandError as exc:
                # The checkpoint is what the query restarts from; the group's
                # position is for operators and catches up at the next batch.
                _log.warning("group %s log %d: commit failed: %s", group, log, exc)
                continue
            self._committed[log] = lsn

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# -- the source ------------------------------------------------------------------------


class LogstrandDataSource(DataSource):
    """``spark.read.format("logstrand")`` / ``df.write`` / ``spark.readStream``."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)

    @classmethod
    def name(cls) -> str:
        return "logstrand"

    def schema(self) -> StructType:
        return read_schema(parse_string_columns(self.options))

    def reader(self, schema: StructType) -> LogstrandReader:
        return LogstrandReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> LogstrandStreamReader:
        return LogstrandStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> LogstrandWriter:
        if overwrite:
            raise InvalidArgumentError("a log is append-only: use mode('append')")
        opts = WriteOptions.parse(self.options)
        # Made here, on the driver, once per write: every task and every
        # retry of it appends under ids derived from it.
        return LogstrandWriter(opts, opts.write_id or uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> LogstrandStreamWriter:
        if overwrite:
            raise InvalidArgumentError("a log is append-only: use outputMode('append')")
        return LogstrandStreamWriter(WriteOptions.parse(self.options))

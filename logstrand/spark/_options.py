"""The data source's options, parsed once on the driver (pure: no pyspark, no trio).

Spark hands options as strings in a case-insensitive map.  Names follow the
Spark-Kafka connector where one exists: ``startingOffsets`` → ``startingLSN``,
``endingOffsets`` → ``endingLSN``, ``maxOffsetsPerTrigger`` →
``maxRecordsPerTrigger``; ``minPartitions``, ``failOnDataLoss``,
``startingTimestamp`` and ``endingTimestamp`` keep their names.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import attrs

from ..errors import InvalidArgumentError
from ..positions import check_group
from ..records import check_log_id
from ..security import Credentials, read_token
from ..transactions import TXN_ID_RE
from ..types import lsn_value

if TYPE_CHECKING:
    from collections.abc import Mapping

#: How many LSNs ``logs`` may name in all (a range "1-1000000" is fine; more is a typo).
LOGS_MAX = 100_000

EARLIEST = "earliest"
LATEST = "latest"


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark's map is case-insensitive; a plain dict (unit tests, users) may not be.
    if name in options:
        return options[name]
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return None


def parse_logs(text: str) -> tuple[int, ...]:
    """``"1,5-9"`` → ``(1, 5, 6, 7, 8, 9)`` (sorted, without repeats)."""
    logs: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo_text, _, hi_text = part.partition("-")
                lo, hi = int(lo_text), int(hi_text)
                if hi < lo:
                    raise InvalidArgumentError(f"logs: range {part!r} runs backwards")
                if hi - lo >= LOGS_MAX:
                    raise InvalidArgumentError(f"logs: range {part!r} is over {LOGS_MAX} logs")
                ids = range(lo, hi + 1)
            else:
                ids = range(int(part), int(part) + 1)
            for log in ids:
                check_log_id(log)
            logs.update(ids)
        except ValueError as exc:
            raise InvalidArgumentError(f"logs: {part!r} is not a log id or range: {exc}") from None
        if len(logs) > LOGS_MAX:
            raise InvalidArgumentError(f"logs: more than {LOGS_MAX} logs")
    if not logs:
        raise InvalidArgumentError("logs: no log named (e.g. '1,5-9')")
    return tuple(sorted(logs))


#: A position: "earliest", "latest", or an LSN per log.
Position = str | dict[int, int]


def parse_position(text: str, what: str, logs: tuple[int, ...]) -> Position:
    """``earliest`` / ``latest`` / JSON ``{"1": 4294967297, "5": "e2n7"}``, or
    when one log is read a bare LSN (``4294967297`` or ``e1n1``)."""
    t = text.strip()
    if t.lower() in (EARLIEST, LATEST):
        return t.lower()
    if len(logs) == 1 and not t.startswith("{"):
        return {logs[0]: lsn_value(t, what)}
    try:
        raw = json.loads(t)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        one = ", or an LSN when one log is read" if len(logs) == 1 else ""
        raise InvalidArgumentError(
            f"{what}: {text!r} is not 'earliest', 'latest' or a JSON object of log → LSN{one}"
        )
    out: dict[int, int] = {}
    for k, v in raw.items():
        try:
            log = int(k)
        except ValueError:
            raise InvalidArgumentError(f"{what}: {k!r} is not a log id") from None
        if log not in logs:
            raise InvalidArgumentError(f"{what}: log {log} is not among the logs read")
        out[log] = lsn_value(v, f"{what}[{log}]")
    return out


def _bool(text: str, what: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"{what}: {text!r} is not true or false")


def _int(text: str, what: str, low: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidArgumentError(f"{what}: {text!r} is not an integer") from None
    if value < low:
        raise InvalidArgumentError(f"{what}: {value} is below {low}")
    return value


@attrs.frozen
class Auth:
    """Credentials for a cluster with TLS: options ``token``, ``ca``, ``cert``,
    ``key``, else ``LOGSTRAND_TOKEN``/``_CA``/``_CERT``/``_KEY`` in the
    environment of the driver (the executors get them with the plan)."""

    token: str | None = attrs.field(default=None, repr=False)
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Auth:
        env = os.environ
        got = {
            name: _get(options, name) or env.get(f"LOGSTRAND_{name.upper()}") or None
            for name in ("token", "ca", "cert", "key")
        }
        if got["token"] is None and env.get("LOGSTRAND_TOKEN_FILE"):
            # As the CLI and ``logstrand.connect`` read it (what `dev up --secure` says).
            got["token"] = read_token(env["LOGSTRAND_TOKEN_FILE"])
        return cls(**got)

    def credentials(self) -> Credentials | None:
        return Credentials.build(token=self.token, ca=self.ca, cert=self.cert, key=self.key)


NO_AUTH = Auth()


@attrs.frozen
class ReadOptions:
    """What a read (batch or streaming) was asked for."""

    url: str
    logs: tuple[int, ...]
    starting: Position
    ending: Position
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    min_partitions: int = 1
    max_records_per_partition: int = 1_000_000
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    #: A consumer group the stream commits its position to at the end of
    #: each micro-batch (for lag and operators; the query's checkpoint, not
    #: the group, decides where it reads from, as with Spark's Kafka source).
    group: str | None = None
    auth: Auth = NO_AUTH
    #: Columns read as UTF-8 strings rather than bytes (``stringColumns``).
    string_columns: frozenset[str] = frozenset()
    #: "committed": records of committed transactions and records outside
    #: any (``isolation``; Kafka's ``kafka.isolation.level``).
    isolation: str = "uncommitted"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        url = _get(options, "url")
        if not url:
            raise InvalidArgumentError("option 'url' is required (the cluster's epoch store URL)")
        logs_text = _get(options, "logs")
        if not logs_text:
            raise InvalidArgumentError("option 'logs' is required, e.g. '1,5-9'")
        logs = parse_logs(logs_text)
        # Kafka's defaults: a batch query reads from the start, a stream from now.
        start_text = _get(options, "startingLSN") or (LATEST if streaming else EARLIEST)
        starting = parse_position(start_text, "startingLSN", logs)
        ending_text = _get(options, "endingLSN")
        if streaming and ending_text is not None:
            raise InvalidArgumentError("endingLSN is for batch queries, not streams")
        ending = parse_position(ending_text or LATEST, "endingLSN", logs)
        if starting == LATEST and not streaming:
            raise InvalidArgumentError("startingLSN 'latest' would read nothing in a batch query")
        if ending == EARLIEST:
            raise InvalidArgumentError("endingLSN 'earliest' would read nothing")
        ts: dict[str, int | None] = {}
        for name in ("startingTimestamp", "endingTimestamp"):
            text = _get(options, name)
            ts[name] = None if text is None else _int(text, name, 0)
        if streaming and ts["endingTimestamp"] is not None:
            raise InvalidArgumentError("endingTimestamp is for batch queries, not streams")
        if ts["startingTimestamp"] is not None and _get(options, "startingLSN") is not None:
            raise InvalidArgumentError("give startingLSN or startingTimestamp, not both")
        if ts["endingTimestamp"] is not None and ending_text is not None:
            raise InvalidArgumentError("give endingLSN or endingTimestamp, not both")
        group = _get(options, "group")
        if group is not None:
            if not streaming:
                raise InvalidArgumentError("group is for streams (a batch query has no position)")
            check_group(group)
        mpt = _get(options, "maxRecordsPerTrigger")
        if mpt is not None and not streaming:
            raise InvalidArgumentError("maxRecordsPerTrigger is for streams")
        return cls(
            url=url,
            logs=logs,
            starting=starting,
            ending=ending,
            starting_timestamp_ms=ts["startingTimestamp"],
            ending_timestamp_ms=ts["endingTimestamp"],
            min_partitions=_int(_get(options, "minPartitions") or "1", "minPartitions", 1),
            max_records_per_partition=_int(
                _get(options, "maxRecordsPerPartition") or "1000000", "maxRecordsPerPartition", 1
            ),
            fail_on_data_loss=_bool(_get(options, "failOnDataLoss") or "true", "failOnDataLoss"),
            max_records_per_trigger=None if mpt is None else _int(mpt, "maxRecordsPerTrigger", 1),
            group=group,
            auth=Auth.parse(options),
            string_columns=parse_string_columns(options),
            isolation=parse_isolation(_get(options, "isolation")),
        )


#: ``isolation``'s values, Kafka's names too.
_ISOLATION = {
    "uncommitted": "uncommitted",
    "read_uncommitted": "uncommitted",
    "committed": "committed",
    "read_committed": "committed",
}


def parse_isolation(text: str | None) -> str:
    if text is None:
        return "uncommitted"
    value = _ISOLATION.get(text.strip().lower())
    if value is None:
        raise InvalidArgumentError(
            f"isolation: {text!r:.40} is not 'read_committed' or 'read_uncommitted'"
        )
    return value


#: The columns ``stringColumns`` may name.
STRING_COLUMNS = ("key", "payload")


def parse_string_columns(options: Mapping[str, str]) -> frozenset[str]:
    """``stringColumns``: ``key``, ``payload`` or both, comma-separated: those
    columns are read as UTF-8 strings (keys usually are text; Spark shows
    bytes as hex)."""
    text = _get(options, "stringColumns") or ""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(STRING_COLUMNS))
    if unknown:
        raise InvalidArgumentError(
            f"stringColumns: {', '.join(unknown)} is not one of {', '.join(STRING_COLUMNS)}"
        )
    return names


@attrs.frozen
class WriteOptions:
    url: str
    log: int | None
    auth: Auth = NO_AUTH
    #: Names the write for its producer ids (``producers.derived_id``): a
    #: write run again under the same id, on the same rows, appends nothing
    #: twice.  None: a new id per write, so only task retries are covered.
    write_id: str | None = None
    #: Write in transactions (``transactionalId``): each task's rows in a
    #: transaction of id ``<this>-<partition>``, left open, and the driver
    #: commits them all when the write (or micro-batch) commits.
    transactional_id: str | None = None
    #: Their timeout (``transactionTimeoutMs``).
    transaction_timeout_s: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        url = _get(options, "url")
        if not url:
            raise InvalidArgumentError("option 'url' is required (the cluster's epoch store URL)")
        log_text = _get(options, "log")
        log = None
        if log_text is not None:
            try:
                log = check_log_id(int(log_text))
            except ValueError:
                raise InvalidArgumentError(f"log: {log_text!r} is not a log id") from None
        write_id = _get(options, "writeId")
        if write_id is not None and not write_id.strip():
            raise InvalidArgumentError("writeId: must not be empty")
        txn_id = _get(options, "transactionalId")
        if txn_id is not None and not TXN_ID_RE.fullmatch(txn_id + "-0000"):
            raise InvalidArgumentError(
                f"transactionalId: {txn_id!r:.60} is not printable ASCII without spaces "
                "(at most 240 characters)"
            )
        timeout_ms = _int(
            _get(options, "transactionTimeoutMs") or "60000", "transactionTimeoutMs", 1
        )
        if timeout_ms > 3_600_000:
            raise InvalidArgumentError("transactionTimeoutMs: at most an hour")
        return cls(url, log, Auth.parse(options), write_id, txn_id, timeout_ms / 1000)

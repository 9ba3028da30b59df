"""Open a LogsDB on RocksDB or on the in-memory engine, with a fake clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from logstrand.batch import make_batch
from logstrand.logsdb import LogsDB, LogsDBOptions, PutBatch
from logstrand.testing import MemoryEngine, memory_logsdb

if TYPE_CHECKING:
    from pathlib import Path


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class Opener:
    """Opens (and reopens) one LogsDB of a given kind."""

    def __init__(self, kind: str, tmp: Path, options: LogsDBOptions | None = None) -> None:
        self.kind = kind
        self.path = tmp / "logsdb"
        self.clock = FakeClock()
        self.options = options
        self.engine = MemoryEngine()

    def open(self) -> LogsDB:
        if self.kind == "rocks":
            return LogsDB.open(self.path, self.options, clock_ms=self.clock)
        self.engine.closed = False
        return memory_logsdb(self.engine, self.options, clock_ms=self.clock)

    def reopen(self, db: LogsDB) -> LogsDB:
        """Close ``db`` and open it again (what a restart keeps)."""
        db.close()
        return self.open()


def put(
    log: int,
    lsns: list[int] | range,
    *,
    ts: int | list[int],
    payload: bytes | None = None,
    keys: list[bytes | None] | None = None,
    copyset: tuple[int, ...] = (1, 2),
    flags: int = 0,
) -> PutBatch:
    payloads = [payload if payload is not None else b"p%d" % n for n in lsns]
    return PutBatch.of(
        log, make_batch(list(lsns), payloads, timestamps_ms=ts, keys=keys, flags=flags), copyset
    )

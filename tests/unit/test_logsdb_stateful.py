"""LogsDB against a dict model: writes, rewrites, trims, partitions, retention, reopen, crash."""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstrand.batch import make_batch
from logstrand.logsdb import LogsDB, LogsDBOptions, PutBatch

from .logsdb_helpers import Opener

LOGS = st.sampled_from([1, 2, 3])
Model = dict[int, dict[int, tuple[int, bytes | None, bytes | None]]]


class LogsDBMachine(RuleBasedStateMachine):
    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="logsdb-stateful-"))
        # No automatic rollover: partitions start only where the rules say, so
        # the model knows exactly which writes a crash may lose.
        opts = LogsDBOptions(partition_duration_ms=10**12, partition_bytes_max=10**12)
        self.opener = Opener(self.kind, self.tmp, opts)
        self.db: LogsDB = self.opener.open()
        self.records: Model = {1: {}, 2: {}, 3: {}}
        self.trims = {1: 0, 2: 0, 3: 0}
        self.durable: tuple[Model, dict[int, int]] = (copy.deepcopy(self.records), dict(self.trims))

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _synced(self) -> None:
        self.durable = (copy.deepcopy(self.records), dict(self.trims))

    @rule(
        log=LOGS,
        lsns=st.lists(st.integers(1, 300), min_size=1, max_size=30, unique=True).map(sorted),
        age_ms=st.integers(0, 10_000),
        keyed=st.booleans(),
        tomb=st.booleans(),
        sync=st.booleans(),
        data=st.data(),
    )
    def write(
        self,
        log: int,
        lsns: list[int],
        age_ms: int,
        keyed: bool,
        tomb: bool,
        sync: bool,
        data: st.DataObject,
    ) -> None:
        ts = self.opener.clock.now_ms - age_ms
        payloads: list[bytes | None] = [
            None if tomb and i % 3 == 0 else data.draw(st.binary(max_size=20))
            for i in range(len(lsns))
        ]
        keys: list[bytes | None] = [b"k%d" % (n % 5) if keyed else None for n in lsns]
        batch = make_batch(lsns, payloads, timestamps_ms=ts, keys=keys)
        self.db.write([PutBatch.of(log, batch, (1, 2))], sync=sync)
        for n, p, k in zip(lsns, payloads, keys, strict=True):
            self.records[log][n] = (ts, p, k)
        if sync:
            self._synced()

    @rule(log=LOGS, lsn=st.integers(0, 320))
    def trim(self, log: int, lsn: int) -> None:
        assert self.db.trim(log, lsn) == max(lsn, self.trims[log])
        if lsn > self.trims[log]:  # only a trim that moves writes (and syncs)
            self.trims[log] = lsn
            self._synced()

    @rule(ms=st.integers(1, 5_000))
    def advance_clock(self, ms: int) -> None:
        self.opener.clock.advance(ms)

    @rule()
    def new_partition(self) -> None:
        self.opener.clock.advance(1000)
        self.db.new_partition()
        self._synced()

    @rule()
    def drop_partitions(self) -> None:
        if self.db.drop_partitions():
            self._synced()

    @rule(log=LOGS, keep_ms=st.integers(0, 20_000))
    def retention(self, log: int, keep_ms: int) -> None:
        old = self.trims[log]
        moved = self.db.apply_retention({log: keep_ms})
        if log in moved:
            new = moved[log]
            assert new > old
            cutoff = self.opener.clock.now_ms - keep_ms
            for n, (ts, _, _) in self.records[log].items():
                if old < n <= new:
                    assert ts < cutoff, f"retention trimmed lsn {n} at {ts}, cutoff {cutoff}"
            self.trims[log] = new
            self._synced()

    @rule()
    def reopen(self) -> None:
        self.db.flush()
        self._synced()
        self.db.close()
        self.db = self.opener.open()

    @precondition(lambda self: self.kind == "memory")
    @rule()
    def crash(self) -> None:
        self.opener.engine.crash()
        self.db = self.opener.open()
        self.records = copy.deepcopy(self.durable[0])
        self.trims = dict(self.durable[1])

    @rule(log=LOGS, a=st.integers(1, 310), b=st.integers(1, 310), limit=st.integers(1, 50))
    def read_range(self, log: int, a: int, b: int, limit: int) -> None:
        lo, hi = min(a, b), max(a, b)
        got = self.db.read(log, lo, hi, max_records=limit)
        want = sorted(n for n in self.records[log] if lo <= n <= hi and n > self.trims[log])
        assert [r.lsn for r in got] == want[:limit]

    @invariant()
    def contents_match(self) -> None:
        for log, recs in self.records.items():
            got = [(r.lsn, r.timestamp_ms, r.payload, r.key) for r in self.db.iter_records(log)]
            want = [(n, ts, p, k) for n, (ts, p, k) in sorted(recs.items()) if n > self.trims[log]]
            assert got == want
            assert self.db.trim_point(log) == self.trims[log]


class RocksLogsDBMachine(LogsDBMachine):
    kind = "rocks"


TestLogsDBMemory = LogsDBMachine.TestCase
TestLogsDBMemory.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestLogsDBRocks = RocksLogsDBMachine.TestCase
TestLogsDBRocks.settings = settings(max_examples=10, stateful_step_count=30, deadline=None)

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")

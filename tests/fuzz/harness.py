"""A node's dispatch, in process, on the in-memory LogsDB: what the fuzz
targets and the hypothesis test feed messages to.

It runs the node's own rules: the admission check (``storage._admission``)
with facts of a fixed cluster, then the committer's handlers (the same code
a node's server calls), and the release persister.  Log 1 holds
acknowledged records in epochs 1 and 2 (sealed: recovery finished) and 3
(the running epoch); no message, however it is built, may change what
readers get of epochs 1 and 2, or make the dispatch raise anything but a
``LogstrandError`` (which a node answers as an error).
"""

from __future__ import annotations

from typing import Any

import attrs

from logstrand.batch import make_batch
from logstrand.errors import LogstrandError
from logstrand.logsdb import PutBatch
from logstrand.storage import _rules as _core
from logstrand.storage._admission import check
from logstrand.storage._group_commit import Committer
from logstrand.storage._health_core import NodeClock
from logstrand.storage._metrics import NodeMetrics
from logstrand.testing._memengine import memory_logsdb
from logstrand.wire import (
    CleanPoint,
    FindTime,
    GetDigest,
    GetLogDirectory,
    LogInfo,
    Release,
    Seal,
    Store,
    Trim,
)

NODE = 1
LOG = 1
FINAL_EPOCHS = (1, 2)
_METRICS = NodeMetrics(NODE)


@attrs.define
class Facts:
    """The cluster as the node's epoch store sees it."""

    def log_known(self, log_id: int) -> bool:
        return log_id in (1, 2, 3)

    def compacted(self, log_id: int) -> bool:
        return log_id == 3

    def node_known(self, node_id: int) -> bool:
        return node_id in (1, 2, 3)

    def next_epoch(self, log_id: int) -> int:
        return 4

    def trim_point(self, log_id: int) -> int:
        return 0

    def last_clean_epoch(self, log_id: int) -> int:
        return 2


class Harness:
    def __init__(self) -> None:
        c = self.committer = Committer(
            node_id=NODE,
            metrics=_METRICS,
            queue_max=16,
            records_max=1000,
            bytes_max=1 << 20,
            release_persist_s=1.0,
            on_released=lambda log, lsn: None,
            on_stored=lambda log, last, release: None,
            clock=NodeClock(lambda: 10_000, 5_000),
        )
        c.attach(memory_logsdb())
        self.facts = Facts()
        self.acked: dict[int, bytes] = {}
        for epoch in (1, 2, 3):
            lsns = [(epoch << 32) | esn for esn in range(1, 6)]
            payloads = [b"e%d-%d" % (epoch, i) for i in range(5)]
            batch = make_batch(lsns, payloads, timestamps_ms=1000 * epoch)
            c.db.write([PutBatch.of(LOG, batch, (1, 2), 1)], sync=False)
            self.acked.update(zip(lsns, payloads, strict=True))
        c.db.seal(LOG, 2)
        c.on_release(LOG, (3 << 32) | 5)

    def dispatch(self, msg: Any) -> None:
        """What the node's server does with one message (but the network)."""
        if check(msg, self.facts) is not None:
            return
        c = self.committer
        try:
            if isinstance(msg, Store):
                if _core.admit_store(c.db, msg):
                    if msg.released_lsn:
                        c.on_release(msg.log_id, msg.released_lsn)
                    c._write([PutBatch(msg.log_id, msg.batch)], msg.sync)
            elif isinstance(msg, Release):
                c.on_release(msg.log_id, msg.lsn)
            elif isinstance(msg, (LogInfo, Seal, GetDigest)):
                c.answer(msg)
            elif isinstance(msg, Trim):
                c.trim(msg)
            elif isinstance(msg, FindTime):
                c.find_time(msg)
            elif isinstance(msg, GetLogDirectory):
                c.log_directory(msg)
            elif isinstance(msg, CleanPoint):
                c.set_clean_point(msg.log_id, msg.lsn)
        except LogstrandError:
            pass  # answered as an error; the node goes on
        # The release persister runs every second on a node.
        c._persist_releases(dict(c.release))

    def check_intact(self) -> None:
        """Acknowledged records of the final epochs read back as appended."""
        db = self.committer.db
        for epoch in FINAL_EPOCHS:
            lo, hi = (epoch << 32) | 1, (epoch << 32) | 5
            got = db.read_batch(LOG, lo, hi)
            payloads = dict(zip(got.lsns, got.payloads, strict=True))
            for lsn in range(lo, hi + 1):
                assert payloads.get(lsn) == self.acked[lsn], f"record {lsn:#x} changed"

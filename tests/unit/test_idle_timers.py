"""A node's timers cost what there is to do, not what the node holds
(issue 35): the group metrics and the cleaner ask whether the node
sequences a log, or look among the compacted logs, and never list every
log it sequences (at 100,000 logs that list was a fifth of an idle node's
CPU: docs/performance.md, "Part 5")."""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING, Any

from logstrand.batch import make_batch
from logstrand.compaction._cleaner import Cleaner
from logstrand.epochstore import LogAttributes, LogRange
from logstrand.placement import CopysetSelector
from logstrand.sequencer import SequencerCore
from logstrand.sequencer._host import SequencerHostCore

if TYPE_CHECKING:
    from collections.abc import Iterator

PLAIN = LogAttributes(replication_factor=2)
COMPACTED = LogAttributes(replication_factor=2, cleanup_policy="compact")


def test_whether_a_host_sequences_a_log_is_one_look() -> None:
    host, ids = SequencerHostCore(1), itertools.count(1)
    for log in (3, 5, 8):
        batch = make_batch(range(1), [b"x"], timestamps_ms=0, keys=[None])
        host.on_append(log, batch, ("conn", 1), 0.0, 1000, owner=1, attributes=PLAIN)
        selector = CopysetSelector((1, 2, 3), 2, rng=random.Random(log))
        host.on_activated(log, SequencerCore(log, 1, selector, ids=ids), 0.0, 1000)
    # One waits for its activation: a slot, but no sequencer yet.
    batch = make_batch(range(1), [b"x"], timestamps_ms=0, keys=[None])
    host.on_append(9, batch, ("conn", 2), 0.0, 1000, owner=1, attributes=PLAIN)
    sequenced = host.sequenced
    assert 5 in sequenced
    assert 9 not in sequenced
    assert 4 not in sequenced
    assert sorted(sequenced) == [3, 5, 8] == host.logs()
    assert sequenced.most() == 4


class CountingSequenced:
    """The node's sequenced logs, counting how they are looked at."""

    def __init__(self, logs: list[int], most: int | None = None) -> None:
        self.logs = set(logs)
        self._most = len(logs) if most is None else most
        self.iterated = 0
        self.asked = 0

    def __contains__(self, log_id: object) -> bool:
        self.asked += 1
        return log_id in self.logs

    def __iter__(self) -> Iterator[int]:
        self.iterated += 1
        return iter(sorted(self.logs))

    def most(self) -> int:
        return self._most


class FakeView:
    def __init__(self, ranges: list[LogRange]) -> None:
        self.ranges = ranges

    def log_attributes(self, log_id: int) -> LogAttributes | None:
        return next((r.attributes for r in self.ranges if log_id in r), None)


class FakeHost:
    def __init__(self, ranges: list[LogRange], sequenced: CountingSequenced) -> None:
        self.view = FakeView(ranges)
        self.node_id = 1
        self._sequenced = sequenced

    def sequenced_logs(self) -> CountingSequenced:
        return self._sequenced


def cleaner_on(host: Any) -> Cleaner:
    cleaner = Cleaner()
    cleaner._host = host
    return cleaner


async def test_a_cleaner_round_without_compacted_logs_looks_at_no_log() -> None:
    """Fails on the code before: each round went through every sequenced
    log to ask its attributes, compacted logs or none."""
    sequenced = CountingSequenced(list(range(1, 30_001)))
    cleaner = cleaner_on(FakeHost([LogRange(1, 100_000, PLAIN)], sequenced))
    assert await cleaner._due() == []
    assert sequenced.iterated == 0
    assert sequenced.asked == 0


def test_a_cleaner_looks_among_the_fewer_of_compacted_logs_and_sequencers() -> None:
    ranges = [LogRange(1, 100_000, PLAIN), LogRange(200_000, 200_009, COMPACTED)]
    # Few compacted logs, many sequencers: one look per compacted log.
    many = CountingSequenced([*range(1, 30_001), 200_002, 200_007])
    assert cleaner_on(FakeHost(ranges, many))._compacted_here() == [200_002, 200_007]
    assert many.iterated == 0
    assert many.asked == 10
    # Many compacted logs, few sequencers: one pass over the sequencers.
    ranges = [LogRange(1, 100_000, COMPACTED), LogRange(100_001, 100_010, PLAIN)]
    few = CountingSequenced([7, 100_003, 40])
    assert cleaner_on(FakeHost(ranges, few))._compacted_here() == [7, 40]
    assert few.iterated == 1
    assert few.asked == 0

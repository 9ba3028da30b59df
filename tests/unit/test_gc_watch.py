"""A node freezes what survives a full collection (``storage._gc``): later
full collections scan only what was made since."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from logstrand.storage._gc import watch_collections
from logstrand.storage._metrics import NodeMetrics

if TYPE_CHECKING:
    from collections.abc import Callable


def _sample(metrics: NodeMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def test_a_full_collection_freezes_what_survived_and_is_timed() -> None:
    metrics = NodeMetrics(1)
    undo = watch_collections(metrics)
    try:
        kept = [[i] for i in range(20_000)]  # lists stay tracked, as a node's state does
        gc.collect()
        assert gc.get_freeze_count() >= len(kept)
        # (Frozen objects that die leave the count: it only comes near.)
        assert _sample(metrics, "logstrand_gc_frozen_objects") >= len(kept)
        full = {"generation": "2"}
        # (Collections of its own may run in between in a long-lived process.)
        fulls = _sample(metrics, "logstrand_gc_seconds_count", full)
        assert fulls >= 1
        # What was frozen is in no generation a collection scans: the next
        # full collection looks only at what came since.
        assert len(gc.get_objects(generation=2)) < len(kept)
        gc.collect()
        assert _sample(metrics, "logstrand_gc_seconds_count", full) >= fulls + 1
        gc.collect(0)
        assert _sample(metrics, "logstrand_gc_seconds_count", {"generation": "0"}) >= 1
    finally:
        undo()
        gc.unfreeze()
    before = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() == before  # undone: nothing frozen any more
    assert kept


def _activator() -> Callable[[range], None]:
    """Activates sequencers of logs as a node does (a selector without a
    generator of its own), each with one record stored, then idle."""
    import itertools

    from logstrand.batch import make_batch
    from logstrand.epochstore import LogAttributes
    from logstrand.errors import Status
    from logstrand.placement import CopysetSelector
    from logstrand.sequencer import SendStore, SequencerCore
    from logstrand.sequencer._host import SequencerHostCore

    host, ids = SequencerHostCore(1), itertools.count(1)
    plain = LogAttributes(replication_factor=2)

    def activate(logs: range) -> None:
        for log in logs:
            batch = make_batch(range(1), [b"x"], timestamps_ms=0, keys=[None], producer=(7, 0))
            host.on_append(log, batch, ("conn", 1), 0.0, 1000, owner=1, attributes=plain)
            weights = dict.fromkeys((1, 2, 3), 1.0)
            selector = CopysetSelector((1, 2, 3), 2, weights=weights, local=1)
            core = SequencerCore(log, 1, selector, recovered=True, ids=ids)
            for action in host.on_activated(log, core, 0.0, 1000):
                if isinstance(action, SendStore):
                    host.on_stored(log, action.message.store_id, action.node_id, Status.OK, 0.0)
        host.tick(1.0, lambda _log: 1)

    return activate


def test_an_active_idle_sequencer_costs_about_fifteen_tracked_objects() -> None:
    """What a full collection scans per log (docs/architecture.md, "What a
    log costs"): the host's slot, the core and what it holds, as a node
    makes them.  ``pytest -s`` prints the count."""
    activate = _activator()
    activate(range(1, 101))
    gc.collect()
    before = len(gc.get_objects())
    activate(range(1000, 3000))
    gc.collect()
    per_log = (len(gc.get_objects()) - before) / 2000
    print(f"{per_log:.1f} tracked objects per active idle sequencer")
    assert 5 <= per_log <= 20


def test_an_active_idle_sequencer_keeps_a_few_kilobytes() -> None:
    """The Python memory one active idle sequencer holds (docs/architecture.md,
    "What a log costs"; ``pytest -s`` prints it).  It was 7.9 KB: a random
    generator per copyset selector (2.5 KB), a dict per core (1.6 KB), an
    empty deque per slot (0.6 KB)."""
    import tracemalloc

    activate = _activator()
    activate(range(1, 101))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        activate(range(1000, 6000))
        gc.collect()
        per_log = (tracemalloc.get_traced_memory()[0] - before) / 5000
    finally:
        tracemalloc.stop()
    print(f"{per_log:.0f} bytes per active idle sequencer")
    assert per_log < 4096

"""A node freezes what survives a full collection (``storage._gc``): later
full collections scan only what was made since."""

from __future__ import annotations

import gc

from logstrand.storage._gc import watch_collections
from logstrand.storage._metrics import NodeMetrics


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

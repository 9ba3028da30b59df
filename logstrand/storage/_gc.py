"""Full garbage collections on a node that holds many logs.

CPython's cyclic collector scans every tracked object of the generation it
collects in one go, and a full collection (generation 2) comes each time the
long-lived objects have grown by a quarter.  A node's long-lived objects are
its state per log: 15 per active idle sequencer
(``tests/unit/test_gc_watch.py`` counts them), a few per log it stores.
With 100,000 logs a full collection stopped a node's loop for seconds (its
log said "paused for 3.1-4.8 s" in a run of ``bench/scale.py --logs
100000`` on commit 1417691): its peers took it for dead and its own pause
detector gave up its sequencers, tens of thousands of needless failovers,
each adding more objects.

What survives a full collection is, nearly all of it, state the node keeps
(cores, tables, connections), which dies by reference counting when it
dies, if ever.  So after each full collection the node freezes what
survived (``gc.freeze``): later full collections scan only what was made
since (``bench/scale.py`` counts the full collections over 0.25 s: none at
100,000 logs).  A frozen object that later became part of cyclic garbage
would never be freed; ``logstrand_gc_frozen_objects`` shows the frozen
count, and ``logstrand_gc_seconds`` each collection's pause.
"""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._metrics import NodeMetrics


def watch_collections(metrics: NodeMetrics) -> Callable[[], None]:
    """Time every collection, freeze after each full one; returns the undo."""
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        generation = info["generation"]
        metrics.gc_seconds.labels(str(generation)).observe(time.perf_counter() - started[0])
        if generation == 2:
            gc.freeze()
            metrics.gc_frozen.set(gc.get_freeze_count())

    gc.callbacks.append(on_gc)

    def undo() -> None:
        if on_gc in gc.callbacks:
            gc.callbacks.remove(on_gc)

    return undo

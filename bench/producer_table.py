"""The idempotent producers' table on a full table: new producers' adds.

    .venv/bin/python bench/producer_table.py [OTHER_MODEL_PY ...]

A log's table keeps ``PRODUCERS_MAX`` producers; once it is full, each new
producer's first batch evicts the least recent one, in the sequencer and on
every storage node.  Prints the seconds per 2,000 such adds (median of 5)
for ``logstrand.idempotence._model`` and for each other copy of that file
given (an older version: ``git show REV:logstrand/idempotence/_model.py``),
run in this process, so the ratio is against a baseline of the same run.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from logstrand.records import kafka_producer_key  # noqa: E402 (the repo first)


def _load(path: str) -> Any:
    """A copy of the model module, its relative imports made absolute."""
    text = Path(path).read_text().replace("from ..", "from logstrand.")
    text = text.replace("from ._", "from logstrand.idempotence._")
    name = f"model_{abs(hash(path))}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(text, path, "exec"), module.__dict__)  # a file of this repo, older
    return module


def _adds(model: Any, rounds: int = 5, n: int = 2000) -> float:
    table = model.Producers()
    full = table.producers_max
    for i in range(full):
        table.add(kafka_producer_key(i, 0), model.Sent(0, 1, i, i))
    took = []
    for r in range(rounds):
        t0 = time.perf_counter()
        for i in range(n):
            k = full + r * n + i
            table.add(kafka_producer_key(k, 0), model.Sent(0, 1, k, k))
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def main() -> None:
    from logstrand.idempotence import _model

    now = _adds(_model)
    print(f"this tree: {now:.4f} s per 2,000 adds to a full table")
    for path in sys.argv[1:]:
        other = _adds(_load(path))
        print(f"{path}: {other:.4f} s ({other / now:.0f}x this tree)")


if __name__ == "__main__":
    main()

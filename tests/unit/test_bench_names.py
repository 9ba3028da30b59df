"""A script in ``bench/`` runs with ``bench/`` first on ``sys.path``: a file
named like a standard module hides that module from everything the script
imports.  ``bench/profile.py`` hid ``profile`` from pyspark (through
``cProfile``), and ``bench/spark.py`` failed at its first query."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_bench_script_hides_a_standard_module() -> None:
    names = {p.stem for p in BENCH.glob("*.py")}
    assert names, BENCH
    assert not names & set(sys.stdlib_module_names)

"""A short pass of each coverage-guided fuzz target (``make fuzz`` runs them longer)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"


@pytest.mark.parametrize(
    ("target", "runs"),
    [
        # Short passes, each a few seconds to twenty (``make fuzz`` runs
        # them for minutes): CI's 20 minutes hold the whole suite.
        ("fuzz_codec.py", 20_000),
        ("fuzz_dispatch.py", 300),
        ("fuzz_node.py", 120),
        ("fuzz_kafka.py", 8_000),
        ("fuzz_sasl.py", 2_000),
        ("fuzz_console.py", 2_000),
        # The C record writer: 20,000 runs found an end that overflowed.
        ("fuzz_fastrecords.py", 20_000),
        # A node's answers to TierRead over objects written wrong (a run
        # costs a trio run: 2 ms).
        ("fuzz_tier.py", 2_000),
    ],
)
def test_fuzz_target_short_run(target: str, runs: int, tmp_path: Path) -> None:
    if target == "fuzz_fastrecords.py":
        from logstrand.kafka import _packed_records

        if not _packed_records.compiled():
            pytest.skip("the C helper is not built here")
    done = subprocess.run(
        [sys.executable, str(FUZZ / target), f"-runs={runs}", "-seed=1", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # libFuzzer counts the inputs it ran besides the mutations asked for (the
    # seed inputs of its dictionary), so it may report a few more than -runs.
    ran = re.search(r"Done (\d+) runs", done.stderr)
    assert ran is not None, done.stderr[-3000:]
    assert int(ran.group(1)) >= runs

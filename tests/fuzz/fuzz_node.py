"""Stateful, coverage-guided fuzzing of a whole node's dispatch (atheris;
see ``node_harness.py``).

    .venv/bin/python tests/fuzz/fuzz_node.py -max_total_time=60 fuzz-corpus/node

One node lives for the whole run, so what earlier inputs did stays (logs
with sequencers, records, read streams, trims, seals).  Each input is a
session: its first byte picks a valid prefix of requests (and whether the
session speaks as a client or as another node), the rest is raw frames
after it.  The corpus starts from ``seeds()`` when it is empty.  A failure
is any part of the node logging an unexpected error, the node no longer
answering, or the harness's acknowledged records changing.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

with atheris.instrument_imports(include=["logstrand"]):
    from tests.fuzz.node_harness import NodeHarness, seeds


def main() -> None:
    from seeded import run

    run(NodeHarness().one, seeds())


if __name__ == "__main__":
    main()

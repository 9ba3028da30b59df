"""The public names users and tests rely on (DESIGN.md) stay where they are."""

from __future__ import annotations

import subprocess
import sys

import logstrand
import logstrand.logsdb
import logstrand.testing
import logstrand.wire


def test_top_level_exports() -> None:
    for name in [
        "LSN_INVALID", "LSN_OLDEST", "LSN_MAX", "TAIL", "Record", "Gap", "GapType",
        "Status", "LogstrandError", "ProtocolError", "CorruptionError",
    ]:  # fmt: skip
        assert hasattr(logstrand, name), name
    assert sorted(logstrand.__all__) == sorted(set(logstrand.__all__))


def test_subpackage_exports_resolve() -> None:
    for mod in (logstrand, logstrand.wire, logstrand.logsdb, logstrand.testing):
        for name in mod.__all__:
            assert getattr(mod, name) is not None, f"{mod.__name__}.{name}"


def test_wire_and_logsdb_are_pure() -> None:
    # Protocol code must not pull in trio: it is driven by tests and simulations
    # without an event loop.
    code = "import sys, logstrand.wire, logstrand.logsdb; assert 'trio' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

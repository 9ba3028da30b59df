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


def test_protocol_cores_are_pure() -> None:
    # Protocol code must not pull in trio: it is driven by tests and simulations
    # without an event loop.
    code = (
        "import sys, logstrand.wire, logstrand.logsdb, logstrand.sequencer,"
        " logstrand.sequencer._procedures, logstrand.storage._rules,"
        " logstrand.client._reader_core, logstrand.placement;"
        " assert 'trio' not in sys.modules, sorted(m for m in sys.modules if 'trio' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

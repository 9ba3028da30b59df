"""The test suite's own machinery: what ``make test`` relies on to run in time."""

from __future__ import annotations

import pytest


def test_make_test_keeps_a_module_on_one_worker(request: pytest.FixtureRequest) -> None:
    """Under ``make test`` (pytest-xdist, ``--dist loadgroup``) a test's id
    carries the group tests/conftest.py gave it, its module: the scheduler
    hands a module whole to one worker, and its module-scoped cluster is
    started once.  Until 2026-11-29 the id stayed bare, for two reasons: the
    conftest marked after xdist had read the marks, and pytest 9.2 keeps the
    id where xdist 3.8 does not write it (pyproject.toml keeps pytest below
    9.2).  Each test was a group of its own: a module's cluster was started
    on every worker, and again after each other module's test in between."""
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("not under make test's --dist loadgroup (run alone)")
    assert request.node.nodeid.endswith(f"@{request.node.path.as_posix()}"), request.node.nodeid

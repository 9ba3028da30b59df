from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from logstrand.epochstore import open_epoch_store
from logstrand.testing import ZooKeeperServer, zookeeper_available

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# CI runs a fixed, modest number of examples; `HYPOTHESIS_PROFILE=soak` runs more.
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "soak", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole run (tests isolate by cluster name)."""
    if not zookeeper_available():
        if os.environ.get("CI"):
            pytest.fail("ZooKeeper is not installed; `make test` installs it when run as root")
        pytest.skip("ZooKeeper is not installed (Debian package 'zookeeper')")
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture(params=["sqlite", "zookeeper"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An epoch store URL of each kind, fresh for each test."""
    cluster = "t" + uuid.uuid4().hex[:12]
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/{cluster}.db"
        open_epoch_store(url, create=True).close()  # others refuse a store that is not there
        return url
    zk: ZooKeeperServer = request.getfixturevalue("zookeeper")
    return f"zk://{zk.address}/{cluster}"


#: Groups that take minutes on one worker, longest first (``make test
#: PYTEST_ARGS=--durations=0``: docs 246 s, rebuilding 180, Spark 202, the
#: simulation 136, operations 126): scheduled before the rest, so that none
#: starts last and leaves the other workers idle at the end.
_LONG_FIRST = (
    "/tests/docs/",
    "spark",
    "/test_rebuilding.py",
    "/tests/sim/",
    "/test_operations.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs three workers, ``--dist loadgroup``):
    a module's tests stay on one worker (they share its fixtures: a cluster, a
    SparkSession), and every Spark module goes to the same worker, so that one
    JVM serves them all.

    First among the hooks: xdist's own hook of this name reads the marks to
    put each test's group in its id.  Run after it (until 2026-11-29), this
    one marked too late, and every test was a group of its own: a module's
    tests went to all three workers, between other modules' tests, and its
    cluster was started again each time (tests/unit/test_suite.py)."""

    def group(item: pytest.Item) -> str:
        path = item.path.as_posix()
        return "spark" if "/tests/spark/" in path else path

    def rank(item: pytest.Item) -> int:
        name = group(item)
        return next((i for i, g in enumerate(_LONG_FIRST) if g in name), len(_LONG_FIRST))

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))
    items.sort(key=rank)  # stable: the order within a rank stays

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three real node processes on 127.0.0.1, shared by a module's tests.

    Logs 1..99 have R=2; log 100 has R=1; logs 200..299 are compacted.
    """
    with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=3) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 99, LogAttributes(replication_factor=2))
            store.create_logs(100, 100, LogAttributes(replication_factor=1))
            store.create_logs(
                200, 299, LogAttributes(replication_factor=2, cleanup_policy="compact")
            )
        yield c

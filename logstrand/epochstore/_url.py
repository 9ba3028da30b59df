"""Pick an epoch store from a URL.

sqlite:///abs/path/cluster.db      (sqlite://relative/path.db also works)
zk://host:port[,host:port]/cluster
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ._base import EpochStore


def open_epoch_store(url: str, **options: float) -> EpochStore:
    """Open the epoch store named by ``url``.

    Raises:
        InvalidArgumentError: the URL has no known scheme or is malformed.
        EpochStoreUnavailableError: the store cannot be reached.
    """
    if url.startswith("sqlite://"):
        from ._sqlite import SqliteEpochStore

        path = url.removeprefix("sqlite://")
        if not path:
            raise InvalidArgumentError(f"bad URL {url!r}: use sqlite:///path/cluster.db")
        return SqliteEpochStore(path, **options)  # type: ignore[arg-type]
    if url.startswith("zk://"):
        from ._zookeeper import ZooKeeperEpochStore

        rest = url.removeprefix("zk://")
        hosts, sep, cluster = rest.partition("/")
        if not sep or not hosts or not cluster or "/" in cluster:
            raise InvalidArgumentError(f"bad URL {url!r}: use zk://host:port[,host:port]/cluster")
        for hp in hosts.split(","):
            host, _, port = hp.rpartition(":")
            if not host or not port.isdigit():
                raise InvalidArgumentError(f"bad ZooKeeper address {hp!r} in {url!r}")
        return ZooKeeperEpochStore(hosts, cluster, **options)
    raise InvalidArgumentError(
        f"unknown epoch store URL {url!r}: use sqlite:///path/cluster.db or zk://host:port/cluster"
    )

"""Pick an epoch store from a URL.

sqlite:///abs/path/cluster.db      (sqlite://relative/path.db also works)
zk://host:port[,host:port]/cluster
zk://user:password@host:port[,host:port]/cluster   (a digest ACL, see docs/security.md)

For ZooKeeper, ``LOGSTRAND_ZK_AUTH=user:password`` gives the credentials when
the URL has none (so that a password need not be on a command line).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from ._base import EpochStore


def open_epoch_store(url: str, *, create: bool = False, **options: float) -> EpochStore:
    """Open the epoch store named by ``url``.

    ``create``: make an SQLite store that is not there yet (what ``dev up``
    and ``nodes add`` do); otherwise a path that names no store is refused,
    so that a mistyped URL never makes an empty cluster.

    Raises:
        InvalidArgumentError: the URL has no known scheme or is malformed.
        NotFoundError: no SQLite store at that path (and not ``create``).
        EpochStoreUnavailableError: the store cannot be reached.
    """
    if url.startswith("sqlite://"):
        from ._sqlite import SqliteEpochStore

        path = url.removeprefix("sqlite://")
        if not path:
            raise InvalidArgumentError(f"bad URL {url!r}: use sqlite:///path/cluster.db")
        if not create and not os.path.exists(path):
            raise NotFoundError(
                f"no cluster at {os.path.abspath(path)} ({url}): `logstrand dev up` makes one, "
                "and so does `logstrand nodes add` for its first node. sqlite:///abs/path.db "
                "names an absolute path, sqlite://rel/path.db one relative to the current "
                "directory"
            )
        return SqliteEpochStore(path, **options)  # type: ignore[arg-type]
    if url.startswith("zk://"):
        from ._zookeeper import ZooKeeperEpochStore

        rest = url.removeprefix("zk://")
        auth = None
        userinfo, at, after = rest.partition("@")
        if at and "/" not in userinfo:
            rest = after
            auth = _zk_auth(userinfo, url)
        elif os.environ.get("LOGSTRAND_ZK_AUTH"):
            auth = _zk_auth(os.environ["LOGSTRAND_ZK_AUTH"], "LOGSTRAND_ZK_AUTH")
        hosts, sep, cluster = rest.partition("/")
        if not sep or not hosts or not cluster or "/" in cluster:
            raise InvalidArgumentError(f"bad URL {url!r}: use zk://host:port[,host:port]/cluster")
        for hp in hosts.split(","):
            host, _, port = hp.rpartition(":")
            if not host or not port.isdigit():
                raise InvalidArgumentError(f"bad ZooKeeper address {hp!r} in {url!r}")
        return ZooKeeperEpochStore(hosts, cluster, auth=auth, **options)
    raise InvalidArgumentError(
        f"unknown epoch store URL {url!r}: use sqlite:///path/cluster.db or zk://host:port/cluster"
    )


def _zk_auth(text: str, where: str) -> tuple[str, str]:
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise InvalidArgumentError(f"bad ZooKeeper credentials in {where}: use user:password")
    return user, password

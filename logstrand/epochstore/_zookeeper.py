"""The production epoch store: ZooKeeper through kazoo.

Documents are znodes under ``/logstrand/<cluster>/``; a compare-and-set is
``set(path, value, version=v)`` (or ``create`` for a new one), which ZooKeeper
refuses with BadVersion/NodeExists when another writer got there first.
Membership is one ephemeral znode per node under ``members/``: it goes when
the node's session ends, and a ChildrenWatch reports the change.

kazoo runs its own threads.  Every call here waits at most ``call_timeout_s``
and turns a connection problem into ``EpochStoreUnavailableError``; kazoo keeps
reconnecting in the background, so calls work again by themselves once
ZooKeeper is back.  A request that timed out may still be applied later by
ZooKeeper; every change here is a compare-and-set or moves a value forward,
so such a late write can skip an epoch but never hand one out twice.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
    ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import KazooRetry
from kazoo.security import make_acl, make_digest_acl

from ..errors import AccessDeniedError, EpochStoreUnavailableError, ExistsError
from ._base import EpochStore, MemberSession, Watch
from ._model import check_cluster_name

if TYPE_CHECKING:
    from collections.abc import Callable

_UNAVAILABLE = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
    ZookeeperStoppedError,
    KazooTimeoutError,
)
_log = logging.getLogger("logstrand.epochstore.zookeeper")
# kazoo logs every failed reconnect; with no logging set up (the CLI), keep
# that off the terminal: errors reach the caller as EpochStoreUnavailableError.
_log.addHandler(logging.NullHandler())


class _ZkMember(MemberSession):
    def __init__(self, store: ZooKeeperEpochStore, node_id: int) -> None:
        self.node_id = node_id
        self._store = store
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._store._members.discard(self)
        # If this fails, the session's end removes the node anyway.
        with contextlib.suppress(EpochStoreUnavailableError, NoNodeError):
            self._store._call(self._store._zk.delete_async(self._store._member_path(self.node_id)))


class ZooKeeperEpochStore(EpochStore):
    """Epoch store on a ZooKeeper ensemble (``hosts`` = "host:port[,host:port]")."""

    def __init__(
        self,
        hosts: str,
        cluster: str,
        *,
        session_timeout_s: float = 10.0,
        call_timeout_s: float = 5.0,
        connect_timeout_s: float = 5.0,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.cluster = check_cluster_name(cluster)
        self.hosts = hosts
        self.url = f"zk://{hosts}/{cluster}"
        # With ``auth`` (user, password), every znode this store creates
        # gets a digest ACL: everything for that user, read for anyone (clients
        # read the configuration; only logstrand processes write it).
        auth_data = None
        default_acl = None
        if auth is not None:
            user, password = auth
            auth_data = [("digest", f"{user}:{password}")]
            default_acl = [
                make_digest_acl(user, password, all=True),
                make_acl("world", "anyone", read=True),
            ]
        self.root = f"/logstrand/{cluster}"
        self.call_timeout_s = call_timeout_s
        self._members: set[_ZkMember] = set()
        self._lost = threading.Event()
        self._zk = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            # Reconnect forever, backing off to one try a second.
            connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
            logger=_log,
            auth_data=auth_data,
            default_acl=default_acl,
        )
        self._zk.add_listener(self._on_state)
        try:
            self._zk.start(timeout=connect_timeout_s)
            if not self._zk.exists(f"{self.root}/members"):
                self._zk.ensure_path(f"{self.root}/members")
        except _UNAVAILABLE as exc:
            self._zk.stop()
            self._zk.close()
            raise EpochStoreUnavailableError(f"ZooKeeper at {hosts} unreachable: {exc}") from exc

    # -- plumbing -----------------------------------------------------------

    def _call(self, async_result: Any) -> Any:
        try:
            return async_result.get(timeout=self.call_timeout_s)
        except NoAuthError:
            raise AccessDeniedError(
                f"ZooKeeper at {self.hosts} refused a write to cluster {self.cluster!r}: it "
                "has a digest ACL; give its credentials (zk://user:password@host:port/cluster "
                "or LOGSTRAND_ZK_AUTH=user:password)"
            ) from None
        except _UNAVAILABLE as exc:
            raise EpochStoreUnavailableError(
                f"epoch store unavailable: ZooKeeper at {self.hosts}: {type(exc).__name__}"
            ) from exc

    def _path(self, path: str) -> str:
        return f"{self.root}/{path}"

    def _member_path(self, node_id: int) -> str:
        return f"{self.root}/members/{node_id}"

    def _on_state(self, state: str) -> None:
        # Runs in kazoo's thread: it must not block.
        if state == KazooState.LOST:
            self._lost.set()
        elif state == KazooState.CONNECTED and self._lost.is_set():
            self._lost.clear()
            threading.Thread(target=self._reregister, name="zk-reregister", daemon=True).start()

    def _reregister(self) -> None:
        """A lost session took our ephemeral nodes with it: put them back."""
        for member in list(self._members):
            try:
                self._create_member(member.node_id, wait_s=30.0)
            except Exception:
                _log.exception("could not re-register node %d", member.node_id)

    # -- primitives ---------------------------------------------------------

    def _get(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self._call(self._zk.get_async(self._path(path)))
        except NoNodeError:
            return None
        return bytes(data), int(stat.version)

    def _cas(self, path: str, value: bytes, version: int | None) -> bool:
        try:
            if version is None:
                self._call(self._zk.create_async(self._path(path), value, makepath=True))
            else:
                self._call(self._zk.set_async(self._path(path), value, version=version))
        except (NodeExistsError, BadVersionError, NoNodeError):
            return False
        return True

    # -- membership ---------------------------------------------------------

    def _create_member(self, node_id: int, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        path = self._member_path(node_id)
        while True:
            try:
                self._call(self._zk.create_async(path, b"", ephemeral=True, makepath=True))
                return
            except NodeExistsError:
                try:
                    _, stat = self._call(self._zk.get_async(path))
                    if stat.ephemeralOwner == self._zk.client_id[0]:
                        return  # ours already (a retried create that went through)
                except NoNodeError:
                    continue
            if time.monotonic() >= deadline:
                raise ExistsError(f"node {node_id} is registered by another live session")
            time.sleep(0.1)

    def register_member(self, node_id: int, *, wait_s: float = 30.0) -> MemberSession:
        self._create_member(node_id, wait_s)
        member = _ZkMember(self, node_id)
        self._members.add(member)
        return member

    def alive_nodes(self) -> frozenset[int]:
        children = self._call(self._zk.get_children_async(f"{self.root}/members"))
        return frozenset(int(c) for c in children)

    def watch_members(self, callback: Callable[[frozenset[int]], None]) -> Watch:
        stopped = threading.Event()

        def on_change(children: list[str]) -> bool:
            if stopped.is_set():
                return False  # tells kazoo to drop the watch
            callback(frozenset(int(c) for c in children))
            return True

        ChildrenWatch(self._zk, f"{self.root}/members", on_change)
        return Watch(stopped.set)

    def close(self) -> None:
        for member in list(self._members):
            member.close()
        try:
            self._zk.stop()
        finally:
            self._zk.close()

"""The production epoch store: ZooKeeper through kazoo.

Documents are znodes under ``/logstrand/<cluster>/``; a compare-and-set is
``set(path, value, version=v)`` (or ``create`` for a new one), which ZooKeeper
refuses with BadVersion/NodeExists when another writer got there first.
Membership is one ephemeral znode per node under ``members/``: it goes when
the node's session ends, and a ChildrenWatch reports the change.  Its data
is what the node says of itself (JSON: its raw clock offset, whether it
takes sequencers and why not), watched by a DataWatch per member.  The raw
offset is the node's wall clock minus ZooKeeper's: every few seconds the
node writes its ``clocks/<id>`` znode and compares the time the server
stamped on the write (``mtime``) with the middle of its own round trip.

kazoo runs its own threads.  Every call here waits at most ``call_timeout_s``
and turns a connection problem into ``EpochStoreUnavailableError``; kazoo keeps
reconnecting in the background, so calls work again by themselves once
ZooKeeper is back.  A request that timed out may still be applied later by
ZooKeeper; every change here is a compare-and-set or moves a value forward,
so such a late write can skip an epoch but never hand one out twice.
"""

from __future__ import annotations

import contextlib
import json
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
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry
from kazoo.security import make_acl, make_digest_acl

from ..errors import AccessDeniedError, EpochStoreUnavailableError, ExistsError
from ._base import EpochStore
from ._members import Member, Members, MemberSession, Watch, cluster_offsets, signature
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

#: Where every cluster's root is made (``/logstrand/<cluster>``).
_PARENT = "/logstrand"
#: Its ACL: anyone reads it and makes a cluster's root in it; a cluster's
#: own root and what is under it carry that cluster's ACL.
_PARENT_ACL = [make_acl("world", "anyone", read=True, create=True)]
#: How often a member measures its clock against ZooKeeper's.
CLOCK_PROBE_S = 2.0
#: A member's znode is rewritten when its raw offset moved by this much.
CLOCK_REPUBLISH_MS = 200
# kazoo logs every failed reconnect; with no logging set up (the CLI), keep
# that off the terminal: errors reach the caller as EpochStoreUnavailableError.
_log.addHandler(logging.NullHandler())


class _ZkMember(MemberSession):
    def __init__(self, store: ZooKeeperEpochStore, node_id: int) -> None:
        self.node_id = node_id
        self._store = store
        self.closed = False
        self.sequencer = True
        self.why = ""
        #: The raw offset measured last, and the one in the member's znode.
        self.raw_ms: int | None = None
        self._published: tuple[int | None, bool, str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, name=f"clock-{node_id}", daemon=True)

    def data(self) -> bytes:
        return json.dumps(
            {"raw_clock_ms": self.raw_ms, "sequencer": self.sequencer, "why": self.why}
        ).encode()

    def start(self) -> None:
        self._thread.start()

    def measure(self) -> None:
        """Measure the raw offset, and rewrite the member's znode when it (or
        what the node says) changed."""
        store = self._store
        path = f"{store.root}/clocks/{self.node_id}"
        try:
            before = time.time() * 1000
            stat = store._call(store._zk.set_async(path, b""))
        except NoNodeError:  # the node's first start
            with contextlib.suppress(NodeExistsError):
                store._call(store._zk.create_async(path, b"", makepath=True))
            before = time.time() * 1000
            stat = store._call(store._zk.set_async(path, b""))
        after = time.time() * 1000
        self.raw_ms = int((before + after) / 2) - int(stat.mtime)
        self._republish()

    def _republish(self) -> None:
        old = self._published
        now = (self.raw_ms, self.sequencer, self.why)
        if (
            old is not None
            and old[1:] == now[1:]
            and (old[0] is None) == (now[0] is None)
            and (old[0] is None or abs(old[0] - (now[0] or 0)) < CLOCK_REPUBLISH_MS)
        ):
            return
        store = self._store
        with contextlib.suppress(NoNodeError):  # the session was lost: re-registered soon
            store._call(store._zk.set_async(store._member_path(self.node_id), self.data()))
            self._published = now

    def _probe(self) -> None:
        while not self._stop.wait(CLOCK_PROBE_S):
            try:
                self.measure()
            except EpochStoreUnavailableError:
                continue
            except Exception:
                _log.exception("node %d: clock probe failed", self.node_id)

    def publish(self, *, sequencer: bool, why: str = "") -> None:
        self.sequencer, self.why = sequencer, why
        self._republish()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
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
        self.root = f"{_PARENT}/{cluster}"
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
            # The parent of every cluster's root is shared by all the clusters
            # on this ZooKeeper.  Made with this cluster's digest ACL (by
            # ensure_path below, when this store is the first), it let no
            # other cluster create its root: open to read and create in.
            if not self._zk.exists(_PARENT):
                with contextlib.suppress(NodeExistsError):
                    self._zk.create(_PARENT, acl=_PARENT_ACL)
            for folder in ("members", "clocks"):
                if not self._zk.exists(f"{self.root}/{folder}"):
                    self._zk.ensure_path(f"{self.root}/{folder}")
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
                self._create_member(member.node_id, member.data(), wait_s=30.0)
                member.returns += 1
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

    def _create_member(self, node_id: int, data: bytes, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        path = self._member_path(node_id)
        while True:
            try:
                self._call(self._zk.create_async(path, data, ephemeral=True, makepath=True))
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

    def register_member(
        self, node_id: int, *, wait_s: float = 30.0, sequencer: bool = True, why: str = ""
    ) -> MemberSession:
        member = _ZkMember(self, node_id)
        member.sequencer, member.why = sequencer, why
        self._create_member(node_id, member.data(), wait_s)
        self._members.add(member)
        member.measure()  # the clock is known before anyone reads the member
        member.start()
        return member

    def members(self) -> Members:
        children = self._call(self._zk.get_children_async(f"{self.root}/members"))
        got: dict[int, tuple[bytes, Any]] = {}
        for child in children:
            with contextlib.suppress(NoNodeError):
                got[int(child)] = self._call(self._zk.get_async(f"{self.root}/members/{child}"))
        return _members(got)

    def watch_members(self, callback: Callable[[Members], None]) -> Watch:
        stopped = threading.Event()
        lock = threading.Lock()
        seen: dict[int, tuple[bytes, Any]] = {}
        watched: set[int] = set()
        last: list[object] = [None]

        def report() -> None:
            # Under ``lock``.
            members = _members(seen)
            if signature(members) != last[0]:
                last[0] = signature(members)
                callback(members)

        def watch_data(node: int) -> None:
            def on_data(data: bytes | None, stat: Any) -> bool:
                if stopped.is_set():
                    return False
                with lock:
                    if data is None or stat is None:
                        seen.pop(node, None)
                        watched.discard(node)
                        report()
                        return False  # gone: a new session gets a new watch
                    seen[node] = (data, stat)
                    report()
                return True

            DataWatch(self._zk, self._member_path(node), on_data)

        def on_children(children: list[str]) -> bool:
            if stopped.is_set():
                return False  # tells kazoo to drop the watch
            now = {int(c) for c in children}
            with lock:
                for gone in set(seen) - now:
                    del seen[gone]
                new = now - watched
                watched.update(new)
                report()
            for node in sorted(new):
                watch_data(node)
            return True

        ChildrenWatch(self._zk, f"{self.root}/members", on_children)
        return Watch(stopped.set)

    def close(self) -> None:
        for member in list(self._members):
            member.close()
        try:
            self._zk.stop()
        finally:
            self._zk.close()


def _members(got: dict[int, tuple[bytes, Any]]) -> Members:
    """Members from their znodes' data and stats (ZooKeeper's clock anchors
    the offsets: ``_members``)."""
    said: dict[int, dict[str, Any]] = {}
    for node, (data, _) in got.items():
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            doc = {}
        said[node] = doc if isinstance(doc, dict) else {}
    raw = {n: int(d["raw_clock_ms"]) for n, d in said.items() if d.get("raw_clock_ms") is not None}
    offsets = cluster_offsets(raw, anchored=True)
    return {
        n: Member(
            n,
            offsets.get(n),
            bool(said[n].get("sequencer", True)),
            str(said[n].get("why", "")),
            int(stat.ctime),
        )
        for n, (_, stat) in got.items()
    }

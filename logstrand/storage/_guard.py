"""The node's door: who a peer is (``authenticate``) and whether it may send
what it sent and whether that makes sense (``check``), before any handler
runs.  The rules are pure (``_admission``, ``security``); this shell keeps the
facts they need, cached from the epoch store, and refreshes a fact that a
refusal rests on (at most every ``RECHECK_S`` per fact and log, so a flood of
nonsense cannot turn into a flood of epoch store reads).

A refusal never rests on a fact that could not be read again: while the
epoch store cannot be reached (this node's session expired, ZooKeeper is
down), a message the cached facts would refuse is answered AGAIN, not
refused for good.  The cache may be old (an epoch handed out since), and a
sequencer told AGAIN tries again; one told "never handed out" gives up.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import trio

from ..errors import EpochStoreUnavailableError, Status
from ..security import (
    NO_GRANTS,
    TRUSTED,
    Grants,
    Principal,
    node_principal,
    refusal,
    user_of_token,
    user_principal,
)
from ..types import lsn_epoch, lsn_esn
from ..wire import Store
from . import _admission
from ._group_access import group_refusal

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..rpc import ClusterView
    from ..wire import Hello
    from ._metrics import NodeMetrics

_log = logging.getLogger("logstrand.node")
RECHECK_S = 0.2
SECURITY_REFRESH_S = 2.0


class Guard:
    def __init__(self, node_id: int, view: ClusterView, metrics: NodeMetrics, *, secure: bool):
        self.node_id = node_id
        self.view = view
        self.metrics = metrics
        self.secure = secure
        self._next_epoch: dict[int, int] = {}
        #: This node's release pointer of a log (its ``NodeStore``'s).
        self.release_of: Callable[[int], int] = lambda _: 0
        self._trim: dict[int, int] = {}
        self._lce: dict[int, int] = {}
        self._rechecked: dict[tuple[str, int], float] = {}
        #: Facts whose last reading failed (the store could not be reached).
        self._unread: dict[tuple[str, int], float] = {}
        self._inflight: dict[tuple[str, int], trio.Event] = {}
        self._es = trio.CapacityLimiter(64)
        self.users: dict[str, dict[str, Any]] = {}
        self.grants: Grants = NO_GRANTS
        self._security_read = -1e9

    # -- facts (the ``_admission.Facts`` port) -----------------------------------

    def log_known(self, log_id: int) -> bool:
        return self.view.log_attributes(log_id) is not None

    def compacted(self, log_id: int) -> bool:
        attributes = self.view.log_attributes(log_id)
        return attributes is not None and attributes.compacted

    def node_known(self, node_id: int) -> bool:
        return node_id in self.view.nodes

    def next_epoch(self, log_id: int) -> int:
        # An epoch this node has released records of was handed out, and the
        # release pointers outlive a restart: the STOREs of warm logs that
        # reach a node just restarted need no epoch-store read.  (Released
        # up to ESN 0 of an epoch: only the one before it is past.)
        released = self.release_of(log_id)
        known = lsn_epoch(released) + (1 if lsn_esn(released) else 0)
        return max(self._next_epoch.get(log_id, 0), known)

    def trim_point(self, log_id: int) -> int:
        return self._trim.get(log_id, 0)

    def trimmed(self, log_id: int, point: int) -> None:
        """This node recorded ``point`` in the epoch store (``TrimLog``)."""
        self._trim[log_id] = max(self._trim.get(log_id, 0), point)

    def last_clean_epoch(self, log_id: int) -> int:
        return self._lce.get(log_id, 0)

    async def _refresh(self, fact: str, log_id: int) -> bool | None:
        """Read ``fact`` of ``log_id`` again: True when read, False when it was
        read too lately (it is fresh), None when the store cannot be reached."""
        now = trio.current_time()
        key = (fact, log_id if fact != "config" else 0)
        running = self._inflight.get(key)
        if running is not None:
            await running.wait()  # someone is reading it now: take that answer
            return None if key in self._unread else True
        if now - self._rechecked.get(key, -1e9) < RECHECK_S:
            return None if key in self._unread else False
        self._rechecked[key] = now
        if len(self._rechecked) > 100_000:  # a flood of distinct logs: forget old entries
            self._rechecked = {k: t for k, t in self._rechecked.items() if now - t < RECHECK_S}
        done = self._inflight[key] = trio.Event()
        try:
            read = await self._read(fact, log_id)
            if read:
                self._unread.pop(key, None)
            else:
                self._unread[key] = now
            return True if read else None
        finally:
            del self._inflight[key]
            done.set()

    async def _read(self, fact: str, log_id: int) -> bool:
        store = self.view.astore
        try:
            async with self._es:
                if fact == "config":
                    await self.view.refresh()
                elif fact == "epochs":
                    # Grouped: a burst of new logs' first STOREs reads together.
                    epochs = await store.grouped(lambda s: s.log_epochs(log_id), read_only=True)
                    self._next_epoch[log_id] = epochs.next_epoch
                elif fact == "trim":
                    self._trim[log_id] = await store.trim_point(log_id)
                elif fact == "lce":
                    # Grouped too: a restart's recoveries (or a stopping
                    # node's epoch ends) send thousands of recovery STOREs.
                    self._lce[log_id] = await store.grouped(
                        lambda s: s.last_clean_epoch(log_id), read_only=True
                    )
        except EpochStoreUnavailableError as exc:
            _log.warning("node %d: cannot check a message: %s", self.node_id, exc)
            return False
        return True

    # -- the checks ----------------------------------------------------------------

    def must_read(self, msg: Any) -> bool:
        """Whether ``check`` would read the epoch store for a STORE (a fact it
        refuses on may be stale), so that it can wait aside.  Only STOREs:
        they come in bursts of new logs; anything else is checked in line, in
        the order it came (a connection that closes drops what waits aside)."""
        if type(msg) is not Store:
            return False
        if msg.recovery_seal:
            return True
        refused = _admission.check(msg, self)
        return refused is not None and refused.recheck is not None

    def passes(self, principal: Principal, msg: Store) -> bool:
        """Whether a plain STORE passes every check as things stand, without
        reading anything (``check`` would return None at once).  False says
        only that it needs ``check``: a refusal, a fact to read again, or a
        recovery's STORE."""
        if msg.recovery_seal:
            return False
        if principal is not TRUSTED and not principal.is_node:
            return False  # a user's STORE: refused by ``check``, with why
        return _admission.check(msg, self) is None

    async def check(self, principal: Principal, msg: Any) -> tuple[Status, str] | None:
        """Why ``msg`` from ``principal`` must be refused, or None."""
        if principal is not TRUSTED:
            why = self._access_refusal(principal, msg)
            if why is not None:
                # Grants may have changed since they were read (a grant just
                # made): read them again, at most every second, and look again.
                with contextlib.suppress(EpochStoreUnavailableError):
                    await self.refresh_security()
                why = self._access_refusal(principal, msg)
            if why is not None:
                self.metrics.refused.labels("access").inc()
                return Status.ACCESS, why
        if type(msg) is Store and msg.recovery_seal and self.log_known(msg.log_id):
            # Recovery STOREs are few: read how far recovery got (rate-limited)
            # so that one whose recovery has finished is refused.
            await self._refresh("lce", msg.log_id)
        refused = _admission.check(msg, self)
        rechecked: set[str] = set()
        # Each refusal may rest on a different stale fact (a new log: first
        # the configuration, then its epochs): read each again, once.
        while refused is not None and refused.recheck not in (None, *rechecked):
            assert refused.recheck is not None
            rechecked.add(refused.recheck)
            read = await self._refresh(refused.recheck, getattr(msg, "log_id", 0))
            if read is None:
                self.metrics.refused.labels("unchecked").inc()
                return Status.AGAIN, (
                    f"{refused.reason} (as last read: the epoch store cannot be reached "
                    "to check again; try again)"
                )
            if not read:
                break
            refused = _admission.check(msg, self)
        if refused is None:
            return None
        self.metrics.refused.labels("nonsense").inc()
        return refused.status, refused.reason

    def _access_refusal(self, principal: Principal, msg: Any) -> str | None:
        return refusal(principal, self.grants, msg, self.view.range_name) or group_refusal(
            principal, self.grants, msg
        )

    # -- principals ----------------------------------------------------------------

    async def refresh_security(self, *, force: bool = False) -> None:
        now = trio.current_time()
        if not force and now - self._security_read < RECHECK_S * 5:
            return
        self._security_read = now
        doc = await self.view.astore.security()
        self.users = doc["users"]
        self.grants = Grants.from_doc(doc)

    async def run_security(self) -> None:
        """Keep users and grants current (revocations apply within seconds)."""
        while True:
            try:
                await self.refresh_security(force=True)
            except EpochStoreUnavailableError as exc:
                _log.warning("node %d: users and grants not refreshed: %s", self.node_id, exc)
            await trio.sleep(SECURITY_REFRESH_S)

    async def authenticate(
        self, hello: Hello, identity: tuple[str, str] | None
    ) -> Principal | tuple[Status, str]:
        if not self.secure:
            return TRUSTED
        if identity is not None and identity[0] == "node":
            node_id = int(identity[1])
            if not self.node_known(node_id):
                await self._refresh("config", 0)
            if not self.node_known(node_id):
                return Status.ACCESS, f"node {node_id} is not in the cluster"
            if hello.node_id is not None and hello.node_id != node_id:
                return Status.ACCESS, f"the certificate is node {node_id}'s, not {hello.node_id}'s"
            return node_principal(node_id)
        if hello.node_id is not None:
            return Status.ACCESS, "a node must present its node certificate"
        name = None
        if identity is not None and identity[0] == "user":
            name = identity[1]
        elif hello.token:
            name = self._user_of(hello.token)
            if name is None:
                with contextlib.suppress(EpochStoreUnavailableError):
                    await self.refresh_security()
                name = self._user_of(hello.token)
            if name is None:
                self.metrics.refused.labels("credentials").inc()
                return Status.ACCESS, "unknown token"
        if name is None or name not in self.users:
            self.metrics.refused.labels("credentials").inc()
            return Status.ACCESS, (
                "this cluster needs a token (--token, LOGSTRAND_TOKEN or "
                "LOGSTRAND_TOKEN_FILE) or a client certificate (--cert and --key)"
            )
        return user_principal(name)

    def _user_of(self, token: str) -> str | None:
        return user_of_token(self.users, token)

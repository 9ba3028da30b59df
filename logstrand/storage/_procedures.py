"""The trio driver of the sequencer's sans-I/O procedures (sealing, recovery).

``logstrand.sequencer._procedures`` holds the steps and rules as generators
that yield commands; this runs them over the node's real connections and the
epoch store.  The seeded simulation (``tests/sim``) is the other driver.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol, assert_never

import attrs
import trio

from ..errors import LogstrandError, Status
from ..placement import CopysetSelector
from ..rpc import Waiters
from ..sequencer import _procedures as procs
from ..sequencer._commands import Finished, Gathering, advance
from ..sequencer._decisions import RECOVERY_STORE_BIT
from ..sequencer._handoff import end_epoch
from ..wire import Release, StoreReply

_log = logging.getLogger("logstrand.node")

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ..epochstore import EpochMetadata
    from ..idempotence import Producers
    from ..idempotence._recovery import Entry
    from ..rpc import ClusterView
    from ..sequencer import SequencerCore
    from ..wire import Store
    from ._metrics import NodeMetrics


class PeerPort(Protocol):
    """How procedures reach the nodes (``Peers``)."""

    async def send_store(self, node_id: int, msg: Store) -> bool: ...
    async def send_release(self, node_id: int, msg: Release) -> None: ...
    async def request(self, node_id: int, make: Callable[[int], Any], timeout_s: float) -> Any: ...


@attrs.define(eq=False)
class ProcedureRunner:
    """Runs procedures for one node; routes the replies to their recovery STOREs."""

    node_id: int
    view: ClusterView
    peers: PeerPort
    #: This node's own answer to a LogInfo, Seal or GetDigest.
    answer: Callable[[Any], Any]
    metrics: NodeMetrics
    _store_ids: Iterator[int] = attrs.field(init=False, factory=lambda: itertools.count(1))
    #: (store id, node) -> that node's status for a recovery STORE.
    _stores: Waiters[tuple[int, int]] = attrs.field(init=False, factory=Waiters)

    def on_store_reply(self, reply: StoreReply) -> bool:
        """Take a STORE reply if it belongs to a procedure; True if it did."""
        if not reply.store_id & RECOVERY_STORE_BIT:
            return False
        self._stores.resolve((reply.store_id, reply.node_id), reply.status)
        return True

    async def run(self, proc: procs.Procedure) -> Any:
        """Drive ``proc`` to its end; returns what it returns, raises what it raises."""
        value: Any = None
        error: LogstrandError | None = None
        while True:
            cmd = advance(proc, value, error)
            if isinstance(cmd, Finished):
                if cmd.error is not None:
                    raise cmd.error
                return cmd.value
            value, error = None, None
            try:
                value = await self._execute(cmd)
            except LogstrandError as exc:
                error = exc  # the procedure decides what an error means

    async def recover(
        self,
        log_id: int,
        epoch: int,
        history: list[EpochMetadata],
        stamp_cap_ms: int,
        *,
        cancelled: Callable[[], bool],
        on_error: Callable[[str], None],
        sealed: list[Entry] | None = None,
    ) -> Producers | None:
        """Recover every unclean epoch below ``epoch`` (see ``procs.recover``)."""
        view = self.view

        def selector(meta: EpochMetadata) -> CopysetSelector:
            return CopysetSelector(
                meta.nodeset,
                meta.replication_factor,
                weights=view.storage_weights(),
                domains=view.domains(meta.replicate_across),
            )

        t0 = time.monotonic()
        done = await self.run(
            procs.recover(
                log_id,
                epoch,
                history,
                selector,
                self._alive,
                stamp_cap_ms,
                cancelled=cancelled,
                on_error=on_error,
                sealed=sealed,
            )
        )
        if done is not None:
            self.metrics.recovery_seconds.observe(time.monotonic() - t0)
        result: Producers | None = done
        return result

    async def end_epoch(self, core: SequencerCore, store_timeout_s: float) -> bool:
        """End ``core``'s epoch (it stops: ``sequencer._handoff``); True when
        the epoch is clean, False when a newer one exists."""
        return bool(await self.run(end_epoch(core, self._alive, store_timeout_s)))

    def _alive(self) -> set[int]:
        # Members the node could not reach lately are left out: a killed
        # node stays a member until its lease or session runs out.
        view = self.view
        return {n for n in view.up if not view.suspected(n)}

    # -- commands -----------------------------------------------------------------

    async def _execute(self, cmd: procs.Command) -> Any:
        # A closed union: mypy fails here when a new command has no case.
        match cmd:
            case procs.Ask():
                return await self._ask(cmd)
            case procs.Tell():
                assert isinstance(cmd.message, Release)
                await self.peers.send_release(cmd.node_id, cmd.message)
                return None
            case procs.StoreCopies():
                return await self._store(cmd)
            case procs.EpochStoreCall():
                return await self.view.astore.grouped(cmd.fn)
            case procs.Sleep():
                await trio.sleep(cmd.seconds)
                return None
            case _:
                assert_never(cmd)

    async def _ask(self, cmd: procs.Ask) -> dict[int, Any]:
        gathering = Gathering(cmd, trio.current_time())

        async def one(node_id: int, msg: Any, scope: trio.CancelScope) -> None:
            if node_id == self.node_id:  # this node: answer directly
                try:
                    reply = self.answer(msg)
                except Exception as exc:  # e.g. a seal on a full disk: as a node that is silent
                    _log.warning(
                        "node %d: own answer to %s failed: %s", node_id, type(msg).__name__, exc
                    )
                    return
            else:
                reply = await self.peers.request(
                    node_id, lambda rid: attrs.evolve(msg, request_id=rid), cmd.timeout_s
                )
            if reply is not None:
                if gathering.add(node_id, reply, trio.current_time()):
                    scope.cancel()
                scope.deadline = gathering.deadline

        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = gathering.deadline
            for node_id, msg in cmd.requests:
                nursery.start_soon(one, node_id, msg, nursery.cancel_scope)
        return gathering.replies

    async def _store(self, cmd: procs.StoreCopies) -> dict[int, int]:
        store_id = RECOVERY_STORE_BIT | next(self._store_ids)
        msg = attrs.evolve(cmd.message, store_id=store_id)
        gathering = Gathering(cmd, trio.current_time())
        slots = {n: self._stores.expect((store_id, n)) for n in msg.copyset}

        async def one(n: int, scope: trio.CancelScope) -> None:
            if not await self.peers.send_store(n, msg):
                self._stores.resolve((store_id, n), None)
                status: int | None = int(Status.CONNFAILED)
            else:
                status = await self._stores.wait((store_id, n), slots[n], cmd.timeout_s)
            if status is not None and gathering.add(n, status, trio.current_time()):
                scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = gathering.deadline
            for n in msg.copyset:
                nursery.start_soon(one, n, nursery.cancel_scope)
        for n in msg.copyset:
            self._stores.resolve((store_id, n), None)  # forget what did not come
        return gathering.replies

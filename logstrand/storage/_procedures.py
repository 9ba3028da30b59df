"""The trio driver of the sequencer's sans-I/O procedures (sealing, recovery).

``logstrand.sequencer._procedures`` holds the steps and rules as generators
that yield commands; this runs them over the node's real connections and the
epoch store.  The seeded simulation (``tests/sim``) is the other driver.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import LogstrandError, Status
from ..placement import CopysetSelector
from ..sequencer import _procedures as procs
from ..wire import Release, StoreReply

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..epochstore import EpochMetadata
    from ._node import Node


class ProcedureRunner:
    """Runs procedures for one node; routes the replies to their recovery STOREs."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._store_ids = itertools.count(1)
        self._waiting: dict[int, tuple[set[int], trio.Event, dict[int, int]]] = {}

    def on_store_reply(self, reply: StoreReply) -> bool:
        """Take a STORE reply if it belongs to a procedure; True if it did."""
        if not reply.store_id & procs.RECOVERY_STORE_BIT:
            return False
        waiting = self._waiting.get(reply.store_id)
        if waiting is not None:
            copyset, done, statuses = waiting
            if reply.node_id in copyset:
                statuses[reply.node_id] = reply.status
                if len(statuses) == len(copyset):
                    done.set()
        return True

    async def run(self, proc: procs.Procedure) -> Any:
        """Drive ``proc`` to its end; returns what it returns, raises what it raises."""
        value: Any = None
        error: LogstrandError | None = None
        while True:
            try:
                cmd = proc.throw(error) if error is not None else proc.send(value)
            except StopIteration as stop:
                return stop.value
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
        *,
        cancelled: Callable[[], bool],
        on_error: Callable[[str], None],
    ) -> bool:
        """Recover every unclean epoch below ``epoch`` (see ``procs.recover``)."""
        node = self.node
        view = node.view

        def selector(meta: EpochMetadata) -> CopysetSelector:
            return CopysetSelector(
                meta.nodeset,
                meta.replication_factor,
                weights=view.storage_weights(),
                domains=view.domains(meta.replicate_across),
            )

        def alive() -> set[int]:
            # Members the node could not reach lately are left out: a killed
            # node stays a member until its lease or session runs out.
            return {n for n in view.alive if not view.suspected(n)}

        t0 = time.monotonic()
        done = await self.run(
            procs.recover(
                log_id,
                epoch,
                history,
                selector,
                alive,
                node.now_ms,
                cancelled=cancelled,
                on_error=on_error,
            )
        )
        if done:
            node.metrics.recovery_seconds.observe(time.monotonic() - t0)
        return bool(done)

    # -- commands -----------------------------------------------------------------

    async def _execute(self, cmd: procs.Command) -> Any:
        node = self.node
        if isinstance(cmd, procs.Ask):
            return await self._ask(cmd)
        if isinstance(cmd, procs.Tell):
            assert isinstance(cmd.message, Release)
            await node.send_release(cmd.node_id, cmd.message)
            return None
        if isinstance(cmd, procs.StoreCopies):
            return await self._store(cmd)
        if isinstance(cmd, procs.EpochStoreCall):
            store = node.view.store
            return await node.view.astore.call(getattr(store, cmd.method), *cmd.args)
        assert isinstance(cmd, procs.Sleep)
        await trio.sleep(cmd.seconds)
        return None

    async def _ask(self, cmd: procs.Ask) -> dict[int, Any]:
        replies: dict[int, Any] = {}
        settling = False

        async def one(node_id: int, msg: Any, scope: trio.CancelScope) -> None:
            nonlocal settling
            reply = await self._request(node_id, msg, cmd.timeout_s)
            if reply is None:
                return
            replies[node_id] = reply
            if len(replies) == len(cmd.requests):
                scope.cancel()
            elif not settling and cmd.enough is not None and cmd.enough(replies):
                # Enough answers: wait a little longer for the rest, no more.
                settling = True
                scope.deadline = min(scope.deadline, trio.current_time() + cmd.settle_s)

        with trio.move_on_after(cmd.timeout_s):
            async with trio.open_nursery() as nursery:
                for node_id, msg in cmd.requests:
                    nursery.start_soon(one, node_id, msg, nursery.cancel_scope)
        return replies

    async def _request(self, node_id: int, msg: Any, timeout_s: float) -> Any:
        node = self.node
        if node_id == node.node_id:  # this node: answer directly
            return node.answer(msg)
        return await node.ask_peer(
            node_id, lambda rid: attrs.evolve(msg, request_id=rid), timeout_s=timeout_s
        )

    async def _store(self, cmd: procs.StoreCopies) -> dict[int, int]:
        node = self.node
        store_id = procs.RECOVERY_STORE_BIT | next(self._store_ids)
        msg = attrs.evolve(cmd.message, store_id=store_id)
        copyset = msg.copyset
        statuses: dict[int, int] = {}
        done = trio.Event()
        self._waiting[store_id] = (set(copyset), done, statuses)
        try:
            with trio.move_on_after(cmd.timeout_s):
                for n in copyset:
                    if not await node.send_store(n, msg):
                        statuses[n] = int(Status.CONNFAILED)
                if len(statuses) < len(copyset):
                    await done.wait()
        finally:
            del self._waiting[store_id]
        return dict(statuses)

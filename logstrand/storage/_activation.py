"""Sequencer activations of a node, queued and bounded.

An append to a log with no sequencer here makes the host core ask for an
activation (once per log): take the next epoch in the epoch store, seal the
log's earlier epochs on its nodeset, and start a ``SequencerCore``.  At most
``--activations-in-flight`` run at once (LogDevice bounds its background
activations the same way); the rest wait in order, their appends with them,
each append still bounded by its own timeout on the client.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import trio

from ..epochstore import Placement
from ..errors import EpochStoreUnavailableError, LogstrandError, Status
from ..placement import CopysetSelector, select_nodeset
from ..sequencer import SequencerCore
from ..sequencer import _procedures as procs
from ..sequencer._activation_queue import ActivationQueue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ..epochstore import EpochMetadata
    from ..rpc import ClusterView
    from ..sequencer._host import HostAction, SequencerHostCore
    from ._metrics import NodeMetrics
    from ._options import NodeOptions
    from ._procedures import ProcedureRunner

_log = logging.getLogger("logstrand.sequencer")


class Host(Protocol):
    """What activations need of the node's ``SequencerHost``."""

    node_id: int
    options: NodeOptions
    view: ClusterView
    procedures: ProcedureRunner
    metrics: NodeMetrics
    nursery: trio.Nursery
    core: SequencerHostCore
    clock_ms: Callable[[], int]

    async def execute(self, actions: list[HostAction]) -> None: ...


class Activations:
    """The activation queue of one node's sequencer host (see the module docstring)."""

    def __init__(self, host: Host, store_ids: Iterator[int]) -> None:
        self.host = host
        #: Shared by every core the node runs: STORE ids never repeat there.
        self.store_ids = store_ids
        self.queue = ActivationQueue(host.options.activations_in_flight_max)

    def soon(self, log_id: int) -> None:
        """Queue an activation (``ActivationQueue``): a burst of first
        appends to ten thousand logs becomes a queue that drains at the epoch
        store's pace, in order, not ten thousand tasks sealing at once."""
        for start in self.queue.add(log_id):
            self.host.nursery.start_soon(self._activator, start)
        self.host.metrics.activations_waiting.set(self.queue.waiting)

    async def _activator(self, log_id: int | None) -> None:
        while log_id is not None:
            try:
                await self._activate(log_id)
            finally:
                log_id = self.queue.finished()
                self.host.metrics.activations_waiting.set(self.queue.waiting)

    async def _activate(self, log_id: int) -> None:
        host = self.host
        try:
            core, history = await self._do_activate(log_id)
        except LogstrandError as exc:
            _log.warning("node %d: log %d: activation failed: %s", host.node_id, log_id, exc)
            await host.execute(host.core.on_activation_failed(log_id, exc.status, str(exc)))
            return
        except Exception as exc:  # a bug: fail the waiting appends, keep the node
            _log.exception("node %d: log %d: activation failed", host.node_id, log_id)
            await host.execute(host.core.on_activation_failed(log_id, Status.FAILED, repr(exc)))
            return
        now, now_ms = trio.current_time(), host.clock_ms()
        await host.execute(host.core.on_activated(log_id, core, now, now_ms, history))

    async def _do_activate(self, log_id: int) -> tuple[SequencerCore, tuple[EpochMetadata, ...]]:
        view = self.host.view
        opts = self.host.options
        attrs_ = view.log_attributes(log_id)
        if attrs_ is None:
            raise LogstrandError(f"log {log_id} does not exist", Status.NOTFOUND)
        weights = view.storage_weights()
        domains = view.domains(attrs_.replicate_across)
        nodeset = select_nodeset(
            log_id,
            weights,
            domains,
            size=attrs_.nodeset_size,
            replication=attrs_.replication_factor,
        )
        if len(nodeset) < attrs_.replication_factor:
            raise LogstrandError("not enough storage nodes for the log", Status.NOSEQUENCER)
        placement = Placement(nodeset, attrs_.replication_factor, attrs_.replicate_across)
        try:
            epoch, meta, history, start_ms, sealed = await self.host.procedures.run(
                procs.activate(
                    log_id,
                    placement,
                    opts.seal_timeout_s,
                    self.host.clock_ms,
                )
            )
        except EpochStoreUnavailableError as exc:
            raise LogstrandError(str(exc), Status.NOSEQUENCER) from exc
        if sealed is not None:  # earlier epochs were sealed (not after a hand-off)
            self.host.metrics.seals.inc()
        selector = CopysetSelector(
            meta.nodeset,
            meta.replication_factor,
            weights=weights,
            domains=view.domains(meta.replicate_across),
            local=self.host.node_id,
        )
        core = SequencerCore(
            log_id,
            epoch,
            selector,
            sync=attrs_.durability == "fsync",
            # Nothing of this epoch is released before the earlier ones are
            # recovered (or when there are none).
            recovered=epoch == 1,
            appenders_max=opts.sequencer_appenders_max,
            store_timeout_s=opts.store_timeout_s,
            ids=self.store_ids,
            esn_max=opts.esn_max,
            last_timestamp_ms=start_ms,
            producer_expiry_ms=opts.producer_expiry_ms,
            sealed_producers=sealed,
        )
        core.down.update(n for n in meta.nodeset if n not in view.up)
        core.no_writes = view.authority.no_writes
        if epoch > 1:
            # A log's first epoch follows no release pointer anywhere: the
            # three asks and answers of a rebroadcast (a fifth of a burst
            # of first appends' messages) would find nothing to spread.
            self.host.nursery.start_soon(
                self.host.procedures.run, procs.rebroadcast_release(log_id, meta.nodeset, 2.0)
            )
        self.host.metrics.sequencer_activations.inc()
        _log.info(
            "node %d: sequencer for log %d active in epoch %d", self.host.node_id, log_id, epoch
        )
        return core, tuple(history)

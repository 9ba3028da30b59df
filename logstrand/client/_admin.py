"""The client's questions to the cluster: a log's placement and state, trim,
find-time, compaction, node status, and requests to the nodes of a log.

Every question goes either to the epoch store (through the view's typed
facade) or to nodes over the client's links; nothing here holds state
between calls except the view's cache of the configuration.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import InvalidArgumentError, LogstrandError, NotFoundError, Status, TransientError
from ..records import check_log_id
from ..types import LSN_MAX, format_lsn
from ..wire import (
    DIRECTORY_FIELDS,
    Compact,
    ErrorReply,
    FindTime,
    FindTimeReply,
    GetLogDirectory,
    GetNodeStatus,
    GetSeqState,
    LogInfo,
    LogInfoReply,
    NodeStatus,
    SeqState,
    TrimLog,
    TrimReply,
)
from ._tier_reads import TierReads
from ._views import LogSegment

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..epochstore import EpochEnd, LogAttributes
    from ..rpc import ClusterView, Links


@attrs.frozen
class LogPlacement:
    """Where a log's copies are: every node of all its nodesets, and the
    highest replication factor it ever had (what a reader needs to decide gaps)."""

    nodes: tuple[int, ...]
    replication: int
    #: The latest epoch handed out when this was read (0: none yet): a later
    #: epoch may have a nodeset this does not know.
    known_epoch: int = 0


class Admin:
    def __init__(self, view: ClusterView, links: Links) -> None:
        self.view = view
        self.links = links
        self.store = view.astore

    # -- the log and its placement ---------------------------------------------

    async def log_attributes(self, log_id: int) -> LogAttributes:
        """The log's attributes (the configuration is read again if it is new).

        Raises:
            InvalidArgumentError: not a log id.
            NotFoundError: no such log.
        """
        check_log_id(log_id)
        attributes = self.view.log_attributes(log_id)
        if attributes is None:
            await self.view.refresh()
            attributes = self.view.log_attributes(log_id)
            if attributes is None:
                raise NotFoundError(f"log {log_id} does not exist")
        return attributes

    async def placement(self, log_id: int) -> LogPlacement:
        """Every node that holds or may hold the log's copies (all its
        nodesets; every storage node before its first sequencer), one read
        of the epoch store."""
        attributes = await self.log_attributes(log_id)
        epochs = await self.store.log_epochs(log_id)
        nodes = {n for h in epochs.history for n in h.nodeset}
        if not nodes:
            nodes = set(self.view.storage_weights())
        r = max([h.replication_factor for h in epochs.history] or [attributes.replication_factor])
        return LogPlacement(tuple(sorted(nodes)), min(r, len(nodes)), epochs.next_epoch - 1)

    async def placements(self, log_ids: list[int]) -> dict[int, LogPlacement]:
        """``placement`` of many logs, with one read of the epoch store."""
        attributes = {log: await self.log_attributes(log) for log in log_ids}
        history = await self.store.log_epochs_many(log_ids)
        everyone = set(self.view.storage_weights())
        out = {}
        for log in log_ids:
            epochs = history[log].history
            nodes = {n for h in epochs for n in h.nodeset} or everyone
            r = max([h.replication_factor for h in epochs] or [attributes[log].replication_factor])
            known = history[log].next_epoch - 1
            out[log] = LogPlacement(tuple(sorted(nodes)), min(r, len(nodes)), known)
        return out

    async def ask_nodes(
        self,
        log_id: int,
        make: Callable[[int], Any],
        *,
        timeout_s: float = 5.0,
        nodes: tuple[int, ...] | None = None,
    ) -> dict[int, Any]:
        """Send ``make(request_id)`` to every node of the log at once: ``{node:
        reply}`` for those that answered."""
        if nodes is None:
            nodes = (await self.placement(log_id)).nodes
        return await self.links.ask(nodes, make, timeout_s)

    async def _answers(
        self, log_id: int, make: Callable[[int], Any], nodes: tuple[int, ...] | None = None
    ) -> list[Any]:
        """The OK answers of the log's nodes; raises TIMEDOUT when none came."""
        replies = await self.ask_nodes(log_id, make, nodes=nodes)
        answers = [r for r in replies.values() if r.status == Status.OK]
        if not answers:
            raise TransientError(f"no node of log {log_id} answered", Status.TIMEDOUT)
        return answers

    async def tell_nodes(self, log_id: int, message: Any) -> None:
        """Send a message that has no reply to every live node of the log
        (best effort: a node that cannot be reached now misses it)."""
        for n in (await self.placement(log_id)).nodes:
            if n in self.view.alive:
                link = await self.links.connected(n)
                if link is not None:
                    link.send_nowait(message)

    async def log_info(
        self, log_id: int, nodes: tuple[int, ...] | None = None
    ) -> list[LogInfoReply]:
        return await self._answers(log_id, lambda rid: LogInfo(rid, log_id), nodes)

    async def log_directory(self, log_id: int) -> list[LogSegment]:
        replies = await self.ask_nodes(log_id, lambda rid: GetLogDirectory(rid, log_id))
        out: list[LogSegment] = []
        for node, reply in replies.items():
            if reply.status == Status.OK:
                e = reply.entries
                for i in range(0, len(e), DIRECTORY_FIELDS):
                    out.append(LogSegment(node, *e[i : i + DIRECTORY_FIELDS]))
        return sorted(out, key=lambda s: (s.node_id, s.first_lsn))

    async def epoch_end(self, log_id: int, epoch: int) -> EpochEnd | None:
        check_log_id(log_id)
        return await self.store.epoch_end(log_id, epoch)

    # -- the sequencer and the tail --------------------------------------------

    async def sequencer_state(self, log_id: int) -> SeqState | None:
        await self.log_attributes(log_id)
        # A dead owner that the membership does not know of yet is routed
        # around, as appends do: otherwise no sequencer would come up to
        # release (or recover) what the dead one left, and a reader up to the
        # tail would wait for it.
        for _ in range(3):
            owner = self.view.sequencer_node(log_id)
            if owner is None:
                return None
            reply = await self.links.request(owner, lambda rid: GetSeqState(rid, log_id))
            if isinstance(reply, SeqState):
                return reply  # OK, or e.g. REDIRECTED: it answered
            self.view.suspect(owner)
        return None

    async def ensure_sequencer(self, log_id: int) -> int:
        state = await self.sequencer_state(log_id)
        return state.tail_lsn if state is not None and state.status == Status.OK else 0

    async def tail_lsn(self, log_id: int, nodes: tuple[int, ...] | None = None) -> int:
        acked = await self.ensure_sequencer(log_id)
        infos = await self.log_info(log_id, nodes)
        # Right after a restart the nodes' release pointers can lag behind what
        # was acknowledged in earlier epochs (they are persisted lazily), and a
        # new sequencer knows only its own epoch: every stored copy counts too
        # (recovery releases or plugs each of them soon).
        return max([acked, *(r.release_lsn for r in infos), *(r.last_lsn for r in infos)])

    # -- trim, time, size ---------------------------------------------------------

    async def trim(self, log_id: int, lsn: int) -> int:
        await self.log_attributes(log_id)
        if not 0 <= lsn <= LSN_MAX:
            raise InvalidArgumentError(f"LSN {lsn} is out of range")
        placement = await self.placement(log_id)
        tail = await self.tail_lsn(log_id, placement.nodes)
        if lsn > tail:
            raise InvalidArgumentError(
                f"cannot trim log {log_id} to {format_lsn(lsn)}: its tail is {format_lsn(tail)}"
            )
        # Through a node, which checks the permission, records the trim point
        # in the epoch store and applies it on the log's nodes.
        nodes = [n for n in placement.nodes if n in self.view.alive]
        nodes += [n for n in sorted(self.view.alive) if n not in nodes]
        for node in nodes:
            reply = await self.links.request(node, lambda rid: TrimLog(rid, log_id, lsn))
            if isinstance(reply, TrimReply) and reply.status == Status.OK:
                return reply.trim_point
            if isinstance(reply, ErrorReply) and reply.status != Status.OK:
                raise LogstrandError(reply.message, Status(reply.status))
        raise TransientError(f"no node could trim log {log_id}", Status.TIMEDOUT)

    async def find_time(self, log_id: int, timestamp_ms: int) -> int:
        if timestamp_ms < 0:
            raise InvalidArgumentError("timestamp must not be negative")
        nodes = (await self.placement(log_id)).nodes
        answers = await self._answers(
            log_id, lambda rid: FindTime(rid, log_id, timestamp_ms), nodes
        )
        found = [r.lsn for r in answers if isinstance(r, FindTimeReply) and r.lsn]
        # Below the nodes' local floors, the objects answer (a tiered log).
        tiered = await TierReads(self, self.links, log_id).find_time(timestamp_ms)
        if tiered is not None:
            found.append(tiered)
        if found:
            return min(found)
        return await self.tail_lsn(log_id, nodes) + 1

    async def data_size(self, log_id: int) -> int:
        infos = await self.log_info(log_id)
        attributes = self.view.log_attributes(log_id)
        copies = attributes.replication_factor if attributes is not None else 1
        return sum(r.bytes for r in infos) // max(1, copies)

    async def node_status(self, node_id: int) -> NodeStatus | None:
        reply = await self.links.request(node_id, GetNodeStatus)
        return reply if isinstance(reply, NodeStatus) and reply.status == Status.OK else None

    # -- compaction ----------------------------------------------------------------

    async def compact(self, log_id: int, timeout_s: float) -> dict[str, Any]:
        await self.log_attributes(log_id)
        owner = self.view.sequencer_node(log_id)
        if owner is None:
            raise TransientError(f"no node can run log {log_id}'s cleaner", Status.NOSEQUENCER)
        reply = await self.links.request(owner, lambda rid: Compact(rid, log_id), timeout_s)
        if reply is None:
            raise TransientError(f"log {log_id}: no answer to COMPACT", Status.TIMEDOUT)
        stats: dict[str, Any] = json.loads(reply.stats_json)
        if reply.status != Status.OK:
            status = Status(reply.status)
            if status == Status.NOTFOUND:
                raise NotFoundError(stats.get("error", f"log {log_id} does not exist"))
            raise LogstrandError(stats.get("error", status.name), status)
        return stats

    async def compaction_state(self, log_id: int) -> dict[str, Any] | None:
        await self.log_attributes(log_id)
        return await self.store.compaction(log_id)

"""The offload: a node moves the old records of the tiered logs it owns to
the object store (docs/tiered-storage.md).

Who: each log has one owner, the storage node first in the log's
rendezvous order over the storage nodes up (the order sequencers are
placed by, so it is most often the node of the log's sequencer).  Views
that differ for a moment may make two owners; both upload, the epoch
store records one (a compare-and-set on the tiered point), and the other
deletes its object.

What: the log's records from past its tiered point (or its trim point)
up to the last one older than ``tier_after`` and acknowledged, read
through the client as any reader reads them (one copy of each record:
the object store holds R=1 of cold data, not R), in objects of about
``object_bytes``.  An object is recorded only once it is in the store
whole (its size read back), so a node killed mid-upload records nothing
and a reader never meets half an object; what it left behind is an
object no segment names.

A trim drops the segments below it from the record, and their objects
from the store, in the owner's next round.

Orphans: an object no segment names (its node was killed after the PUT
and before the record, or failed to delete it) and older than
``orphan_age_s`` (an upload in flight is younger) is deleted.  Each
round looks at ``SWEEP_LOGS`` of the logs the node owns, the next ones
after the last round's: a round's cost does not grow with the logs, and
every log is looked at in turn.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import LogstrandError
from ..placement import rendezvous_owner
from . import _offload_core as core
from ._io import perform_io
from ._objects import ObjectStoreError
from ._offload_core import OffloadStats
from ._steps import (
    Command,
    FindTime,
    NextItems,
    ObjectCall,
    OpenRead,
    Procedure,
    StoreCall,
    drive,
)

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..rpc import ClusterView
    from ._objects import ObjectStore

_log = logging.getLogger("logstrand.tier")
#: Logs one round looks at for orphan objects.
SWEEP_LOGS = 16

__all__ = ["SWEEP_LOGS", "Offload", "OffloadStats"]


class Offload:
    """One node's offload rounds (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        view: ClusterView,
        node_id: int,
        object_bytes: int,
        clock_ms: Any,
        orphan_age_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.orphan_age_s = orphan_age_s
        #: The log after which the next sweep for orphans starts.
        self._swept = 0
        self.view = view
        self.node_id = node_id
        self.object_bytes = object_bytes
        self.clock_ms = clock_ms
        self.stats = OffloadStats()
        #: Where this node last read the trim feed (-1: never).
        self._trim_seq = -1

    def owned(self) -> list[tuple[int, int]]:
        """``(log, tier_after_ms)`` of the tiered logs this node owns now:
        over the storage nodes up, so that a log whose owner is down (or
        killed mid-upload) is uploaded by the next one."""
        up = self.view.up
        weights = {n: w for n, w in self.view.storage_weights().items() if n in up}
        out = []
        for r in self.view.ranges:
            after = r.attributes.tier_after_ms
            if after is None:
                continue
            for log in range(r.first, r.last + 1):
                if rendezvous_owner(log, weights) == self.node_id:
                    out.append((log, after))
        return out

    async def round(self, client: AsyncClient) -> None:
        """One pass over the logs this node owns.  What it reads does not
        grow with idle logs: the tails of all of them in one request per
        node (no sequencer activated for a log whose records are all
        released), the tiered points in one read, and the trim points only
        of the logs the trim feed names."""
        owned = self.owned()
        if not owned:
            return
        logs = [log for log, _ in owned]
        astore = self.view.astore
        tails = await client.tail_lsns(logs)
        points = await astore.run(lambda s: s.tier_points(logs))
        seq, trimmed = await astore.run(lambda s: s.trims_changed(self._trim_seq))
        mine = set(logs)
        changed = mine if trimmed is None else mine & set(trimmed)
        now = self.clock_ms()
        undropped = False
        for log, after in owned:
            pending = log in changed
            try:
                if pending:
                    await self.drop_trimmed(log)
                    pending = False
                if tails[log] > points[log]:
                    await self.offload(client, log, now - after, tails[log])
            except (LogstrandError, ObjectStoreError) as exc:
                self.stats.failures += 1
                undropped = undropped or pending
                _log.warning("tier: log %d not offloaded now: %s", log, exc)
            except Exception:
                # A bug met on one log must not take the node down, nor stop
                # the others: said, counted, and the next round tries again.
                self.stats.failures += 1
                undropped = undropped or pending
                _log.exception("tier: log %d: the offload failed", log)
        if not undropped:  # else the feed is read from where it was again
            self._trim_seq = seq
        try:
            await self.sweep(logs)
        except (LogstrandError, ObjectStoreError) as exc:
            _log.warning("tier: the sweep for orphan objects waits: %s", exc)

    async def sweep(self, logs: list[int]) -> None:
        """Delete the orphan objects of the next ``SWEEP_LOGS`` of ``logs``
        (see the module docstring)."""
        after = [log for log in logs if log > self._swept]
        batch = (after + [log for log in logs if log <= self._swept])[:SWEEP_LOGS]
        if not batch:
            return
        self._swept = batch[-1]
        old = self.clock_ms() / 1000 - self.orphan_age_s
        for log in batch:
            await self._drive(None, core.sweep_log(self.stats, log, old))

    async def drop_trimmed(self, log: int) -> None:
        """Forget the segments a trim left behind, and delete their objects."""
        await self._drive(None, core.drop_trimmed(self.stats, log))

    async def offload(self, client: AsyncClient, log: int, cutoff_ms: int, tail: int) -> None:
        """Upload the log's records past its tiered point, older than
        ``cutoff_ms`` and at or below ``tail``."""
        up = core.Uploader(self.node_id, self.object_bytes, _token, self.stats)
        await self._drive(client, core.offload(up, log, cutoff_ms, tail))

    async def _drive(self, client: AsyncClient | None, proc: Procedure) -> Any:
        """Run one of ``_offload_core``'s procedures to its end: what a step
        raises is thrown into it (it passes on what it does not handle)."""
        async with contextlib.AsyncExitStack() as stack:
            reads = _Reads(client, stack)
            return await drive(
                proc, partial(self._perform, reads), (LogstrandError, ObjectStoreError)
            )

    async def _perform(self, reads: _Reads, cmd: Command) -> Any:
        match cmd:
            case StoreCall() | ObjectCall():
                return await perform_io(cmd, self.view, self.store)
            case FindTime():
                assert reads.client is not None
                return await reads.client.find_time(cmd.log_id, cmd.timestamp_ms)
            case OpenRead():
                assert reads.client is not None
                reads.stream = await reads.stack.enter_async_context(
                    reads.client.read(cmd.log_id, cmd.start, cmd.until)
                )
                return None
            case NextItems():
                assert reads.stream is not None
                return await reads.stream.next_runs()
        raise AssertionError(f"no such command here: {cmd!r}")


@attrs.define
class _Reads:
    """A procedure's client and the read it opened (closed with ``stack``)."""

    client: AsyncClient | None
    stack: contextlib.AsyncExitStack
    stream: Any = None


def _token() -> str:
    return secrets.token_hex(4)

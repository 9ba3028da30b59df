"""The trio shell around ``HealthCore``: it reads what the membership says
of this node, logs and counts a clock that crosses the bound, and publishes
whether the node takes sequencers whenever that changes."""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..errors import EpochStoreUnavailableError
from ._health_core import HealthCore, Said

if TYPE_CHECKING:
    from ..epochstore import Members, MemberSession
    from ..rpc import ClusterView
    from ._metrics import NodeMetrics

_log = logging.getLogger("logstrand.node")
#: What a node says while it starts: routing leaves it out until it has looked.
STARTING = Said(False, "starting")


#: In a node's data directory: it last stopped when told to, and handed its
#: sequencers off (``Node.hand_off``); its next start skips the hold-down.
HANDED_OFF_FILE = "handed-off"


def mark_handed_off(data_dir: str) -> None:
    (Path(data_dir) / HANDED_OFF_FILE).write_text(f"{int(time.time() * 1000)}\n")


def take_handed_off(data_dir: str) -> bool:
    """Whether the node last stopped handing off (the mark goes: it holds once)."""
    mark = Path(data_dir) / HANDED_OFF_FILE
    try:
        mark.unlink()
    except FileNotFoundError:
        return False
    return True


class Health:
    def __init__(self, core: HealthCore, view: ClusterView, metrics: NodeMetrics) -> None:
        self.core = core
        self.view = view
        self.metrics = metrics
        self.node_id = core.node_id
        self.session: MemberSession | None = None
        self._said = STARTING
        self._wake = trio.Event()

    @property
    def said(self) -> Said:
        """What the node says of itself now (published, or about to be)."""
        said = self.core.said(trio.current_time())
        return said if not said.sequencer else self._said

    async def register(self, *, handed_off: bool = False) -> MemberSession:
        """Join the membership (saying "starting"), read it, and say what
        this node is; the clock is measured before this returns."""
        astore = self.view.astore
        node_id = self.node_id
        self.session = await astore.run(
            lambda s: s.register_member(node_id, sequencer=False, why=STARTING.why)
        )
        members = await astore.members()
        self.on_members(members)
        self.core.on_registered(members, trio.current_time(), handed_off=handed_off)
        await self._publish()
        return self.session

    def on_members(self, members: Members) -> None:
        """The view read the membership (in trio: a view listener)."""
        line = self.core.on_members(members)
        if line is not None:
            _log.warning("node %d: %s", self.node_id, line)
        clock = self.core.clock
        if clock.offset_ms is not None:
            self.metrics.clock_offset.set(clock.offset_ms / 1000)
        self._wake.set()

    def stopping(self) -> None:
        """Take no sequencers any more: the node stops (``Node.hand_off``)."""
        self.core.stopping = True
        self._wake.set()

    def hold_down(self, why: str) -> None:
        """Take no sequencers for the hold-down, from now (``_health_core``)."""
        self.core.hold_down(trio.current_time(), why)
        self._wake.set()

    async def run(self) -> None:
        """Publish what the node says whenever it changes (a hold-down ends
        on the time alone: looked at every second); hold down when the
        membership session was lost and taken again."""
        returns = self.session.returns if self.session is not None else 0
        while True:
            with trio.move_on_after(1.0):
                await self._wake.wait()
            self._wake = trio.Event()
            session = self.session
            if session is not None and session.returns != returns:
                returns = session.returns
                _log.warning(
                    "node %d: its membership session was lost and taken again", self.node_id
                )
                self.core.hold_down(trio.current_time(), "its membership session was lost")
            await self._publish()

    async def _publish(self) -> None:
        said = self.core.said(trio.current_time())
        session = self.session
        if said == self._said or session is None:
            return
        try:
            await trio.to_thread.run_sync(
                functools.partial(session.publish, sequencer=said.sequencer, why=said.why)
            )
        except EpochStoreUnavailableError as exc:
            _log.warning("node %d: could not say %s: %s", self.node_id, said, exc)
            return
        if said.sequencer:
            _log.info("node %d: takes sequencers", self.node_id)
        else:
            _log.warning("node %d: takes no sequencers: %s", self.node_id, said.why)
        self._said = said
        self.metrics.takes_sequencers.set(int(said.sequencer))

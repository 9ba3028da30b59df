"""What a node's sequencer host can be asked (``_host.SequencerHostCore``'s
read-only side: gauges, status, a stopping node's hand-off).  Pure: no trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Status
from ..wire import SeqState
from ._handoff import endable
from ._host_actions import HostOptions, ReplySeqState, SequencerState, Slot

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._core import SequencerCore


class Sequenced:
    """The logs a host runs a sequencer of, as a live view: asking about
    one log costs one look, not a list of them all (a node's timers ask)."""

    __slots__ = ("_slots",)

    def __init__(self, slots: dict[int, Slot]) -> None:
        self._slots = slots

    def __contains__(self, log_id: object) -> bool:
        slot = self._slots.get(log_id)  # type: ignore[call-overload]
        return slot is not None and slot.core is not None

    def __iter__(self) -> Iterator[int]:
        return iter([log for log, s in self._slots.items() if s.core is not None])

    def most(self) -> int:
        """At least as many as there are (activations under way count too)."""
        return len(self._slots)


class HostQueries:
    """Mixed into ``SequencerHostCore``, whose slots and attention set it reads."""

    options: HostOptions
    _slots: dict[int, Slot]
    _attention: set[int]

    @property
    def sequenced(self) -> Sequenced:
        return Sequenced(self._slots)

    def sequencer(self, log_id: int) -> SequencerCore | None:
        slot = self._slots.get(log_id)
        return slot.core if slot is not None else None

    def cores(self) -> list[SequencerCore]:
        return [s.core for s in self._slots.values() if s.core is not None]

    def ending(self) -> list[SequencerCore]:
        """Rule 9: the sequencers that may end their epoch themselves now."""
        slots = self._slots.values()
        return [s.core for s in slots if s.core and not s.activating and endable(s.core)]

    def logs(self) -> list[int]:
        """The logs this node runs a sequencer of."""
        return sorted(log for log, s in self._slots.items() if s.core is not None)

    def state(self, log_id: int, now: float) -> SequencerState | None:
        slot = self._slots.get(log_id)
        core = slot.core if slot is not None else None
        if slot is None or core is None:
            return None
        return SequencerState(
            core.epoch,
            core.recovered,
            0.0 if core.recovered else now - slot.activated_at,
            slot.stalled(now, self.options.recovery_stall_s),
            slot.attempts_failed,
            slot.error,
        )

    def seq_state(
        self, action: ReplySeqState, request_id: int, release: int, now: float
    ) -> SeqState:
        """The answer ``action`` stands for, to request ``request_id``, for
        every driver alike; ``release``: the node's own release pointer of
        the log (LogsDB's, which the host does not hold)."""
        log_id = action.token[-1]
        state, seq = self.state(log_id, now), self.sequencer(log_id)
        if action.status != Status.OK or state is None or seq is None:
            return SeqState(request_id, int(action.status), message=action.message)
        released = max(release, seq.released_lsn)
        return SeqState(
            request_id,
            int(Status.OK),
            # The tail is every acknowledged append, released yet or not.
            max(released, seq.last_known_good_lsn),
            state.epoch,
            state.recovered,
            int(state.recovering_s * 1000),
            state.stalled,
            state.attempts_failed,
            state.error[:4096],
            released_lsn=released,
        )

    def stalled_logs(self, now: float) -> list[int]:
        # A log not recovered keeps the attention of ticks (rule 7).
        stall_s, slots = self.options.recovery_stall_s, self._slots
        return sorted(
            log
            for log in self._attention
            if (s := slots.get(log)) and s.core and s.stalled(now, stall_s)
        )

    def sequencer_count(self) -> int:
        """Sequencers here, and activations under way (for a gauge)."""
        return len(self._slots)

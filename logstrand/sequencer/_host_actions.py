"""What the sequencer host asks of its driver (actions), its options, what it
reports of a log, and the checks of records before any STORE.  Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ..errors import Status
from ..records import CONTROL
from ._core import Action, SequencerCore

if TYPE_CHECKING:
    from ..batch import PackedBatch
    from ..epochstore._model import EpochMetadata, LogAttributes


@attrs.frozen
class Activate:
    """Run the activation procedure for the log, then report ``on_activated``
    (or ``on_activation_failed``)."""

    log_id: int


@attrs.frozen
class Recover:
    """Run the recovery of the epochs before ``core.epoch`` (``history``: every
    placement the log had, as the activation read it); report each failed
    attempt with ``on_recovery_error`` and the end with ``on_recovery_done``.
    Stop when ``recovery_wanted(log_id, core)`` turns false."""

    log_id: int
    core: SequencerCore
    history: tuple[EpochMetadata, ...] = ()


@attrs.frozen
class RecoveryStalled:
    """A recovery has not finished within the bound: say so loudly."""

    log_id: int
    epoch: int
    seconds: float
    attempts_failed: int
    error: str


@attrs.frozen
class ReplySeqState:
    """The answer to a GET_SEQ_STATE (after activation when there was none)."""

    token: Any
    status: Status
    message: str = ""


HostAction = Action | Activate | Recover | RecoveryStalled | ReplySeqState


@attrs.frozen
class HostOptions:
    payload_bytes_max: int = 1024 * 1024
    key_bytes_max: int = 4096
    waiting_appends_max: int = 4096
    recovery_stall_s: float = 10.0
    #: Logs a tick looks at after a membership change, at most (host rule 7):
    #: a node with 100,000 sequencers looks at them over 5 s of ticks, not in
    #: one tick that stops its loop for seconds.
    sweep_per_tick: int = 1000


@attrs.frozen
class SequencerState:
    """What a node says of one log's sequencer (``logstrand info`` shows it)."""

    epoch: int
    recovered: bool
    recovering_s: float
    stalled: bool
    attempts_failed: int
    error: str


def check_records(
    batch: PackedBatch, attributes: LogAttributes, options: HostOptions
) -> tuple[Status, str] | None:
    """Why a log cannot take these records, or None.  Checked before any STORE
    (a record LogsDB cannot hold would fail the whole group commit it lands
    in, other clients' records with it), from the lengths in the batch's
    body: nothing is decompressed.  The body must match the checksum the
    client computed."""
    if not batch.body_ok():
        return Status.CHECKSUM_MISMATCH, "the batch's body does not match its checksum"
    compacted = attributes.compacted
    limit = options.payload_bytes_max
    # A payload None is a record without a payload on any log (a Kafka record
    # whose value is null), and on a compacted log the tombstone of its key.
    lens = batch.payload_lens()
    if max(lens) > limit:
        return Status.TOOBIG, f"payload of {max(lens)} bytes exceeds the limit of {limit}"
    extra = batch.extra_lens()
    if extra is not None and max(extra) > limit:
        return Status.TOOBIG, f"headers of {max(extra)} bytes exceed the limit of {limit}"
    keys = batch.key_lens()
    if compacted and -1 in keys and _keyless_records(batch, keys):
        return Status.NOKEY, "the log is compacted: every record needs a key"
    key_max = options.key_bytes_max
    if max(keys) > key_max:
        return Status.TOOBIG, f"a key is longer than {key_max} bytes"
    return None


def _keyless_records(batch: PackedBatch, keys: list[int]) -> bool:
    """Whether a record without a key is other than a transaction's marker
    (CONTROL): a marker has no key and is never compacted away (Kafka's
    control records are kept by the cleaner the same way), and a
    transaction that wrote to a compacted log must be able to end there."""
    flags = batch.flags()
    return any(k == -1 and not f & CONTROL for k, f in zip(keys, flags, strict=True))


@attrs.define(eq=False)
class Slot:
    """What the sequencer host keeps of one log: its core, an activation
    under way, the appends waiting for it, and how its recovery stands."""

    core: SequencerCore | None = None
    activating: bool = False
    #: Appends (batch, token) and GET_SEQ_STATE tokens (batch None) waiting
    #: for the activation.  (A list: an empty deque costs 600 bytes, and
    #: every active log has a slot.)
    waiting: list[tuple[PackedBatch | None, Any]] = attrs.Factory(list)
    activated_at: float = 0.0
    #: Host rule 8: activate again now, appends waiting or not.
    renew: bool = False
    attempts_failed: int = 0
    error: str = ""
    stall_reported: bool = False

    def stalled(self, now: float, stall_s: float) -> bool:
        """Host rule 4: not recovered ``stall_s`` after the activation."""
        core = self.core
        return (
            core is not None
            and not core.recovered
            and not core.preempted
            and now - self.activated_at >= stall_s
        )

    def stall_text(self, now: float) -> str:
        core = self.core
        assert core is not None
        return (
            f"log {core.log_id}: the sequencer of epoch {core.epoch} has not recovered the "
            f"earlier epochs in {now - self.activated_at:.1f} s "
            f"({self.attempts_failed} attempts failed; last: {self.error or 'none yet'}); "
            "appends wait until it has"
        )

"""A sequencer that stops cleanly ends its own epoch.  Pure: a procedure.

Theory of operation
-------------------
Recovery (``_procedures``) is how the *next* sequencer learns what an epoch
holds when the one that ran it is gone: it seals the nodeset, gathers
digests from an f-majority, decides record by record and writes a bridge.
That is the price of a crash.  A node that is told to stop (SIGTERM) need
not pay it for its logs: each of its sequencers knows exactly what its epoch
holds once its appends in flight are done, and can write the epoch's end
itself (``end_epoch``).  The next sequencer of the log then finds every
earlier epoch clean and recovers nothing: a restart of a node with
thousands of active logs costs each of them neither a recovery nor a seal
(``_procedures.activate``: the end records the epoch's newest timestamp,
which the seal's replies would have given).

An epoch is ended here only when its sequencer is *endable*: every ESN it
handed out is fully stored (the LNG is the last one; an append is
acknowledged only then, so nothing above it was ever acknowledged), all of
it is released, its own recovery of the earlier epochs is done, and no
newer sequencer preempted it.  Then its end is what recovery would decide:
every record up to the LNG, a bridge right after it.

Rules (those of recovery, kept the same way):

1. Nothing is written when the epoch store has handed out a newer epoch of
   the log: that sequencer's recovery decides.
2. The bridge is a recovery STORE carrying the epoch's own seal, the one
   recovery STORE nodes take in its own epoch (``storage._admission``): a
   node refuses it once a newer sequencer sealed the log
   (``PreemptedError``), or once the epoch is clean.  A recovery by the
   next sequencer that runs at the same time decides the same end (every
   ESN up to the LNG is on R nodes, so an f-majority sees it, and nothing
   above it exists but this bridge), and its higher seal wins.
3. The end is recorded in the epoch store first (in the same call that
   reads the next epoch), then the bridge is stored on R nodes, then the
   nodeset is told it may release past the epoch, at once: a bridge that
   waited unreleased for long would look to its nodes like what a dead
   sequencer leaves (``ReleaseWatch``), and they would have the log
   activated elsewhere.  The epoch is marked clean last, with the producers
   of idempotent appends and where the next epoch's Kafka offsets start
   (``set_clean``).  An end recorded before its bridge is safe: until the
   nodes are told to release past the epoch they serve nothing above the
   LNG, and a recovery of the epoch decides the same end.

A stop cut short anywhere leaves what a crashed recovery leaves: the next
sequencer recovers the epoch as usual.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import TYPE_CHECKING

from ..epochstore._model import EpochEnd
from ..errors import StaleError
from ..types import compose_lsn
from ..wire import Release
from ._commands import EpochStoreCall, Procedure, Tell
from ._decisions import write_decisions
from ._procedures import set_clean
from ._recovery import Decision, Mutation

if TYPE_CHECKING:
    from collections.abc import Callable, Container

    from ..epochstore._base import EpochStore
    from ._core import SequencerCore


def endable(core: SequencerCore) -> bool:
    """Whether ``core`` may end its epoch itself (see the module docstring)."""
    return (
        core.idle
        and core.recovered
        and core.producers_known
        and not core.preempted
        and core.lng_esn == core.next_esn - 1
        and core.released_esn == core.lng_esn
    )


def _record_end(log_id: int, epoch: int, end: EpochEnd, store: EpochStore) -> bool:
    """Rules 1 and 3: the end, unless a newer epoch was handed out."""
    if store.log_epochs(log_id).next_epoch != epoch + 1:
        return False
    store.record_epoch_end(log_id, epoch, end)
    return True


def end_epoch(
    core: SequencerCore, alive: Callable[[], Container[int]], store_timeout_s: float
) -> Procedure:
    """Write the end of ``core``'s epoch: its records up to its LNG, a bridge
    after.  ``core`` must be ``endable`` and take nothing more; its producer
    table goes into the epoch store.  ``alive``: the nodes believed up, for
    the bridge's copyset.  Returns True when the epoch is clean, False when
    a newer epoch exists (rule 1).

    Raises:
        PreemptedError: a node was sealed by a newer sequencer.
        LogstrandError: the bridge could not be stored on R nodes.
    """
    log_id, epoch, lng_esn = core.log_id, core.epoch, core.lng_esn
    # With its newest stamp: the next sequencer starts from it unsealed.
    end = EpochEnd(lng_esn, lng_esn + 1, epoch, core.last_timestamp_ms)
    recorded = yield EpochStoreCall(partial(_record_end, log_id, epoch, end))
    if not recorded:
        return False
    bridge = Mutation(lng_esn + 1, Decision.BRIDGE)
    yield from write_decisions(
        log_id,
        epoch,
        epoch,
        [bridge],
        core.selector,
        alive,
        core.last_timestamp_ms,
        store_timeout_s,
    )
    for n in core.selector.nodeset:
        yield Tell(n, Release(log_id, compose_lsn(epoch + 1, 0)))
    with contextlib.suppress(StaleError):  # a newer sequencer's recovery got further
        yield EpochStoreCall(partial(set_clean, log_id, epoch, core.producers))
    return True

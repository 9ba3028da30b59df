"""Moving logs onto the storage nodes there are now, in bounded steps
(``AsyncClient.rebalance``, ``logstrand logs rebalance``).

A log's nodeset is chosen when its sequencer activates, among the storage
nodes of that moment; nodes added later get none of its new copies until
its next epoch.  Rebalancing starts that next epoch for the logs that
would choose differently now.

Rules
-----
1. A log needs to move when the nodeset of its latest epoch is not the one
   an activation would choose now: ``select_nodeset`` over the storage nodes
   and their weights, with the log's attributes, as the activating node
   computes it.  A log never activated has nothing to move.
2. Logs move a step at a time, at most ``step`` of them: every node is asked
   once per step (``Renew``, one request per node, not one per log) to move
   the sequencers it runs among them to a new epoch (host rule 8: appends
   wait for the new epoch as at an epoch's last ESN, none fails).  The step
   ends when each log renewed shows a later epoch in the epoch store, or at
   ``timeout_s``; then the next step starts.  A cluster is never asked to
   activate more than ``step`` logs at once.
3. A log whose sequencer runs nowhere is *idle*: it is not activated (that
   would cost an epoch and a seal for nothing); its next activation chooses
   the new nodeset anyway.  When a node that is up did not answer, the logs
   no node renewed are counted *stuck*, not idle: it may run them.
4. Copies already written stay where they are: each epoch's nodeset is kept
   in the log's placement history, and readers follow it across epochs.
5. Every node must speak protocol 5 (which knows ``Renew``); a node that
   does not is named in the error, before any log moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import InvalidArgumentError, LogstrandError
from ..placement import select_nodeset
from ..records import check_log_id
from ..wire import RENEW_LOGS_MAX, Renew, RenewReply

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._admin import Admin

RENEW_PROTOCOL = 5
#: How often a step looks at the epoch store for the new epochs.
POLL_S = 0.2


@attrs.frozen
class RebalanceReport:
    """What a rebalance found and did.  ``to_move``: the logs whose latest
    nodeset is not the one they would get now (rule 1); of those, ``moved``
    are in a new epoch, ``idle`` have no sequencer running (rule 3) and
    ``stuck`` were renewed but showed no new epoch in time, or may run on a
    node that did not answer."""

    checked: int
    to_move: tuple[int, ...]
    moved: tuple[int, ...] = ()
    idle: tuple[int, ...] = ()
    stuck: tuple[int, ...] = ()


async def plan(admin: Admin, log_ids: Sequence[int]) -> list[int]:
    """The logs of ``log_ids`` that need to move (rule 1), in order."""
    logs = list(dict.fromkeys(log_ids))
    for log in logs:
        check_log_id(log)
    view = admin.view
    await view.refresh()
    attributes = {log: await admin.log_attributes(log) for log in logs}
    history = await admin.store.log_epochs_many(logs)
    weights = view.storage_weights()
    out = []
    for log in logs:
        epochs = history[log].history
        if not epochs:
            continue
        a = attributes[log]
        want = select_nodeset(
            log,
            weights,
            view.domains(a.replicate_across),
            size=a.nodeset_size,
            replication=a.replication_factor,
        )
        if tuple(epochs[-1].nodeset) != want:
            out.append(log)
    return out


async def rebalance(
    admin: Admin,
    log_ids: Sequence[int],
    *,
    step: int = 100,
    dry_run: bool = False,
    timeout_s: float = 30.0,
    on_step: Callable[[RebalanceReport], None] | None = None,
) -> RebalanceReport:
    """See the module docstring; ``on_step`` gets the report so far after each step.

    Raises:
        InvalidArgumentError: ``step`` out of 1..4096, or not a log id.
        NotFoundError: a log does not exist.
        LogstrandError: a node does not speak protocol 5, or refused the request.
    """
    if not 1 <= step <= RENEW_LOGS_MAX:
        raise InvalidArgumentError(f"step must be 1..{RENEW_LOGS_MAX}, not {step}")
    to_move = await plan(admin, log_ids)
    report = RebalanceReport(len(set(log_ids)), tuple(to_move))
    if dry_run or not to_move:
        return report
    nodes = await _nodes(admin)
    moved: list[int] = []
    idle: list[int] = []
    stuck: list[int] = []
    for i in range(0, len(to_move), step):
        chunk = to_move[i : i + step]
        renewed, silent = await _renew(admin, nodes, chunk)
        unasked = [log for log in chunk if log not in renewed]
        # A node up but silent may run some of them: not idle, but unknown.
        (stuck if silent else idle).extend(unasked)
        done, late = await _await_epochs(admin, renewed, timeout_s)
        moved += [log for log in chunk if log in done]
        stuck += [log for log in chunk if log in late]
        report = attrs.evolve(report, moved=tuple(moved), idle=tuple(idle), stuck=tuple(stuck))
        if on_step is not None:
            on_step(report)
    return report


async def _nodes(admin: Admin) -> list[int]:
    """The nodes that may run a sequencer and can be reached now, each on
    protocol 5 (rule 5).  One that cannot be reached runs no sequencer."""
    view = admin.view
    reached = []
    for node in sorted(set(view.storage_weights()) | set(view.sequencer_weights())):
        link = await admin.links.connected(node)
        if link is None:
            continue
        if link.conn.protocol < RENEW_PROTOCOL:
            raise LogstrandError(
                f"node {node} speaks protocol {link.conn.protocol}; rebalancing needs "
                f"{RENEW_PROTOCOL} on every node: upgrade it first"
            )
        reached.append(node)
    return reached


async def _renew(
    admin: Admin, nodes: list[int], chunk: list[int]
) -> tuple[dict[int, int], list[int]]:
    """Ask every node to renew the logs of ``chunk`` it runs: ``{log: its
    epoch before}`` for those some node renewed, and the nodes that did
    not answer (they were reachable when the rebalance began)."""
    replies = await admin.links.ask(nodes, lambda rid: Renew(rid, tuple(chunk)), 10.0)
    renewed: dict[int, int] = {}
    silent = []
    for node in nodes:
        reply = replies.get(node)
        if not isinstance(reply, RenewReply) or len(reply.epochs) != len(chunk):
            silent.append(node)
            continue
        for log, epoch in zip(chunk, reply.epochs, strict=True):
            if epoch:
                renewed[log] = max(renewed.get(log, 0), epoch)
    return renewed, silent


async def _await_epochs(
    admin: Admin, renewed: dict[int, int], timeout_s: float
) -> tuple[set[int], set[int]]:
    """Wait until each renewed log shows an epoch past the one it had:
    (those that did, those that did not within ``timeout_s``)."""
    pending = dict(renewed)
    done: set[int] = set()
    with trio.move_on_after(timeout_s):
        while pending:
            history = await admin.store.log_epochs_many(list(pending))
            for log, epoch in list(pending.items()):
                if history[log].next_epoch - 1 > epoch:
                    done.add(log)
                    del pending[log]
            if pending:
                await trio.sleep(POLL_S)
    return done, set(pending)

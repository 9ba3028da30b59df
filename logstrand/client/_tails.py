"""Many logs' tails in one round per node (``AsyncClient.tail_lsns``).

``tail_lsn`` of one log asks the log's sequencer (activating one) and every
node of its nodeset: three requests a log, so ten thousand logs cost thirty
thousand.  ``tail_lsns`` sends each node one ``GetTails`` per
``TAILS_LOGS_MAX`` logs instead, and each answers, per log, whether a
sequencer of it runs there and that sequencer's acknowledged tail, its own
release pointer and its highest stored LSN.

Rules
-----
1. A log's tail is the highest of those numbers over the nodes that
   answered.  It is at or above every acknowledged append when a sequencer
   of the log answered (its tail covers what it acknowledged) or when every
   storage node answered (each acknowledged append is stored on R of them).
2. A log is asked again alone, as ``tail_lsn`` asks (which activates its
   sequencer), when no sequencer of it answered and either some storage
   node did not answer or a node holds copies above every release pointer:
   those records wait for a sequencer's recovery to release them, and a
   reader up to that tail would wait for it too.  An idle log whose
   sequencer retired, with everything released, is answered from the nodes.
3. A node that speaks protocol 3 does not know ``GetTails``: it counts as
   not answering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..errors import LogstrandError, NotFoundError
from ..records import check_log_id
from ..wire import GetTails, TailsReply
from ._tails_core import TailsTally, chunked

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._admin import Admin

#: Logs asked alone at once (rule 2).
ALONE_IN_FLIGHT = 64
TAILS_PROTOCOL = 4


async def tail_lsns(admin: Admin, log_ids: Sequence[int], timeout_s: float = 5.0) -> dict[int, int]:
    """``{log: tail}`` for every log named (see the module docstring).

    Raises:
        InvalidArgumentError: not a log id.
        NotFoundError: a log does not exist.
    """
    logs = list(dict.fromkeys(log_ids))
    for log in logs:
        check_log_id(log)
    await _known(admin, logs)
    view = admin.view
    storage = set(view.storage_weights())
    nodes = sorted(storage | set(view.sequencer_weights()))
    chunks = chunked(logs)
    tally = TailsTally(logs, storage, len(chunks))
    errors: list[LogstrandError] = []  # raised after the nursery, not in a group

    async def ask(node: int, chunk: tuple[int, ...]) -> None:
        link = await admin.links.connected(node)
        if link is None or link.conn.protocol < TAILS_PROTOCOL:
            return  # rule 3: not an answer
        rid = admin.links.next_request_id()
        reply = await link.request(GetTails(rid, chunk), rid, timeout_s)
        try:
            admin.links.check_access(reply)
        except LogstrandError as exc:
            errors.append(exc)
            return
        if isinstance(reply, TailsReply):
            tally.take(node, chunk, reply.entries)

    async with trio.open_nursery() as nursery:
        for node in nodes:
            for chunk in chunks:
                nursery.start_soon(ask, node, chunk)
    if errors:
        raise errors[0]
    tails = tally.tails
    alone = tally.alone()
    if alone:
        room = trio.Semaphore(ALONE_IN_FLIGHT)

        async def one(log: int) -> None:
            async with room:
                try:
                    tails[log] = await admin.tail_lsn(log)
                except LogstrandError as exc:
                    errors.append(exc)

        async with trio.open_nursery() as nursery:
            for log in alone:
                nursery.start_soon(one, log)
        if errors:
            raise errors[0]
    return tails


async def _known(admin: Admin, logs: list[int]) -> None:
    view = admin.view
    unknown = [log for log in logs if view.log_attributes(log) is None]
    if unknown:
        await view.refresh()
        unknown = [log for log in unknown if view.log_attributes(log) is None]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise NotFoundError(f"log {unknown[0]} does not exist{more}")

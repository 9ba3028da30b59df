"""Finding a coordinator: the node that runs the sequencer of a positions
log coordinates what that log holds, a group's members
(``_subscribe``) as a transactional id's producer (``_transaction``), as a
Kafka partition's leader coordinates the groups and transactional ids
hashed to it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LogstrandError, Status, TransientError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..positions._client import Groups
    from ..rpc import Links


class CoordinatorClient(Protocol):
    """What finding and asking a coordinator needs of a client (``AsyncClient``)."""

    links: Links

    @property
    def groups(self) -> Groups: ...
    def sequencer_node(self, log_id: int) -> int | None: ...
    async def ensure_sequencer(self, log_id: int) -> int: ...
    async def ask_node(
        self, node_id: int, make: Callable[[int], Any], *, timeout_s: float = ...
    ) -> Any: ...


async def coordinator_node(
    client: CoordinatorClient, plog: int, *, again: bool, protocol: int, what: str
) -> int:
    """The node that coordinates what positions log ``plog`` holds: the
    one running its sequencer, activated first if none runs or ``again``
    (the one known did not answer, or said it was not the coordinator).

    Raises TransientError (no node runs it now), LogstrandError
    NOTSUPPORTED (the node speaks a protocol before ``protocol``)."""
    # The positions logs are made on first use (a dict lookup once they
    # exist): a new cluster's first group or transactional id finds them.
    await client.groups.ensure_log()
    node = None if again else client.sequencer_node(plog)
    if node is None:
        await client.ensure_sequencer(plog)
        node = client.sequencer_node(plog)
    if node is None:
        raise TransientError(f"no node runs the coordinator of {what}", Status.AGAIN)
    link = await client.links.get(node)
    if link.conn.protocol < protocol:
        raise LogstrandError(
            f"node {node} does not coordinate {what} (a version before it)", Status.NOTSUPPORTED
        )
    return node

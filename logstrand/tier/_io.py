"""The two commands every tier shell performs the same way (``_offload``,
``_serve``): the epoch store's calls through the view's store runner, the
object store's in worker threads (obstore's calls block)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ._steps import ObjectCall, StoreCall

if TYPE_CHECKING:
    from ..rpc import ClusterView
    from ._objects import ObjectStore


async def perform_io(cmd: StoreCall | ObjectCall, view: ClusterView, store: ObjectStore) -> Any:
    if isinstance(cmd, StoreCall):
        return await view.astore.run(cmd.fn)
    call = getattr(store, cmd.method)
    # Abandoned on cancel: a node stopping does not wait for a call in flight.
    return await trio.to_thread.run_sync(call, *cmd.args, abandon_on_cancel=True)

"""Trio helpers shared by the cleaner and a node's part of compaction."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

import trio

from ..errors import LogstrandError, NotFoundError, Status

if TYPE_CHECKING:
    from ..epochstore import LogAttributes


class Throttle:
    """Holds a byte rate: ``await spent(n)`` sleeps as needed (0: no limit)."""

    def __init__(self, rate_bytes_s: int) -> None:
        self.rate = rate_bytes_s
        self.start = time.monotonic()
        self.total = 0

    async def spent(self, n: int) -> None:
        self.total += n
        if self.rate <= 0:
            await trio.lowlevel.checkpoint()
            return
        ahead = self.total / self.rate - (time.monotonic() - self.start)
        await trio.sleep(max(0.0, ahead))


class AttributesView(Protocol):
    def log_attributes(self, log_id: int) -> LogAttributes | None: ...
    async def refresh(self) -> None: ...


async def compacted_attributes(view: AttributesView, log_id: int) -> LogAttributes:
    """The log's attributes (the configuration read again if it is new here);
    only compacted logs are cleaned.

    Raises:
        NotFoundError: no such log.  LogstrandError NOTSUPPORTED: not compacted.
    """
    attributes = view.log_attributes(log_id)
    if attributes is None:
        await view.refresh()
        attributes = view.log_attributes(log_id)
    if attributes is None:
        raise NotFoundError(f"log {log_id} does not exist")
    if not attributes.compacted:
        raise LogstrandError(f"log {log_id} is not compacted", Status.NOTSUPPORTED)
    return attributes

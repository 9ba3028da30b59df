"""The front's reads of the cluster configuration beyond its view's own.

The view reads the configuration every 2 s.  A front reads it again sooner
when what it was asked for may have changed meanwhile: a topic it does not
know (another front or the CLI may just have made it), a live node with no
Kafka address yet, a listing of every topic.  Such reads are at most one
every ``REREAD_S``, whoever asks: a client that asks again and again for a
topic that does not exist costs the epoch store five reads a second, not one
per request.  A caller never gets a read older than its question: one that
comes within ``REREAD_S`` of the last read waits for the next (as long as
the rest of that interval), and every caller waiting then shares it.
"""

from __future__ import annotations

from typing import Any

import trio

REREAD_S = 0.2


class Rereads:
    def __init__(self, view: Any) -> None:
        self.view = view
        self._at = -1e9
        #: Set when the read that callers wait for (``reread``) is done.
        self._pending: trio.Event | None = None

    async def reread(self) -> None:
        """Read the configuration again, in a read that starts after this call."""
        if self._pending is not None:  # one is waiting for its turn: it starts later
            await self._pending.wait()
            return
        if trio.current_time() >= self._at + REREAD_S:
            self._at = trio.current_time()
            await self.view.refresh()
            return
        self._pending = done = trio.Event()
        try:
            await trio.sleep_until(self._at + REREAD_S)
            self._pending = None  # who asks from now on waits for a later read
            self._at = trio.current_time()
            await self.view.refresh()
        finally:
            if self._pending is done:
                self._pending = None
            done.set()

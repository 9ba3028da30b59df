"""Appends to a named range (``client.append("orders", payload, key=k)``):
which of its logs a record goes to.

A keyed record goes where Kafka's default partitioner would put it
(``placement.partition_for_key``: murmur2 of the key modulo the range's
size), so a key lands in the same log whether it came through the Kafka
front or this client.  A record without a key goes to the range's logs in
turn.  A name the client's view does not know makes it read the
configuration again once before NOTFOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..epochstore import named_logs
from ..errors import InvalidArgumentError, NotFoundError
from ..placement import partition_for_key
from ..types import LSN_OLDEST

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from ..epochstore import LogRange, NamedLogs
    from ..rpc import ClusterView

    #: ``AsyncClient.append_batch`` to one log.
    AppendBatch = Callable[
        [int, list[bytes | None], list[bytes | None], list[bytes | None] | None],
        Awaitable[list[int]],
    ]


class Names:
    """Named ranges as the client's view knows them (see the module docstring)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._of: list[LogRange] | None = None
        self._named: dict[str, NamedLogs] = {}
        #: The next log of each named range for records without a key.
        self._turn: dict[str, int] = {}

    def range(self, name: str) -> NamedLogs | None:
        ranges = self.view.ranges
        if ranges is not self._of:  # the view read the configuration again
            self._named = named_logs(ranges)
            self._turn = {n: t for n, t in self._turn.items() if n in self._named}
            self._of = ranges
        return self._named.get(name)

    def log_for(self, name: str, key: bytes | None) -> int | None:
        """The log of range ``name`` for a record with ``key`` (None: no such
        range in the view)."""
        r = self.range(name)
        if r is None:
            return None
        if key is not None:
            return r.log(partition_for_key(key, r.count))
        turn = self._turn.get(name, 0)
        self._turn[name] = turn + 1
        return r.log(turn % r.count)

    async def starts(self, name: str) -> dict[int, int]:
        """Every log of the range ``name``, to be read from its oldest record
        (``read_many`` of a name).

        Raises:
            NotFoundError: no range has that name.
        """
        r = self.range(name)
        if r is None:
            await self.view.refresh()
            r = self.range(name)
        if r is None:
            raise NotFoundError(f"no log range is named {name!r}")
        return dict.fromkeys(r.logs(), LSN_OLDEST)

    async def resolve(self, name: str, key: bytes | None) -> int:
        """``log_for``, reading the configuration again for a name not seen yet.

        Raises:
            NotFoundError: no range has that name.
        """
        log = self.log_for(name, key)
        if log is None:
            await self.view.refresh()
            log = self.log_for(name, key)
        if log is None:
            raise NotFoundError(f"no log range is named {name!r}")
        return log


async def append_to_name(
    names: Names,
    append_batch: AppendBatch,
    name: str,
    payloads: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    extras: Sequence[bytes | None] | None = None,
) -> list[int]:
    """``AsyncClient.append_batch`` to a named range: the records of each log
    in one batch of their own (with their ``extras``), the batches at once,
    the LSNs in the order of the records."""
    if keys is None:
        keys = [None] * len(payloads)
    elif len(keys) != len(payloads):
        raise InvalidArgumentError("keys and payloads differ in length")
    if not payloads:
        return []
    # One look-up (and at most one read of the configuration) for the batch,
    # then each key's partition; records without a key share the next log.
    unkeyed = await names.resolve(name, None) if None in keys else None
    r = names.range(name)
    if r is None:
        await names.resolve(name, b"")  # not known yet: read the configuration, or NOTFOUND
        r = names.range(name)
        assert r is not None
    logs = [unkeyed if k is None else r.log(partition_for_key(k, r.count)) for k in keys]
    groups: dict[int, list[int]] = {}
    for i, log in enumerate(logs):
        assert log is not None
        groups.setdefault(log, []).append(i)
    lsns = [0] * len(payloads)

    async def one(log: int, index: list[int]) -> None:
        got = await append_batch(
            log,
            [payloads[i] for i in index],
            [keys[i] for i in index],
            None if extras is None else [extras[i] for i in index],
        )
        for i, lsn in zip(index, got, strict=True):
            lsns[i] = lsn

    async with trio.open_nursery() as nursery:
        for log, index in groups.items():
            nursery.start_soon(one, log, index)
    return lsns

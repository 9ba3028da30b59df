"""The commands tiered storage's procedures yield (the offload's in
``_offload_core``, a node's answers in ``_answers``): each ``yield`` hands
one to a driver and resumes with its result, or with what it raised thrown
in.  The node drives them with trio (``_offload``, ``_serve``); the seeded
simulation drives the same procedures over an object store of its own, with
its failures and delays between any two steps (``tests/sim/tiering.py``).

Opening an object (its footer, then its index) is a procedure too, so that
what a reader meets in a store that fails between the two reads is the
production code's answer, not a test's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any

import attrs

from ._format import FOOTER_BYTES, Block, CorruptObject, Footer, parse_footer, parse_index


@attrs.frozen
class StoreCall:
    """Ask the epoch store: resume with ``fn(store)``."""

    fn: Callable[[Any], Any]


@attrs.frozen
class ObjectCall:
    """Call the object store (``ObjectStore.put``, ``size``, ``read``,
    ``delete`` or ``listing``): resume with its result, or with its
    ``ObjectStoreError`` thrown in."""

    method: str
    args: tuple[Any, ...]


@attrs.frozen
class FindTime:
    """The log's first LSN stamped at or after ``timestamp_ms`` (the client's ``find_time``)."""

    log_id: int
    timestamp_ms: int


@attrs.frozen
class OpenRead:
    """Open a read of the log's LSNs ``start..until`` as any reader reads
    them (one copy of each record, gaps said); ``NextItems`` takes from it.
    The driver closes it when the procedure ends."""

    log_id: int
    start: int
    until: int


@attrs.frozen
class NextItems:
    """The next items of the open read ([]: it is over)."""


@attrs.frozen
class AwaitAhead:
    """Wait for a read-ahead of this block, if one runs (``_serve``)."""

    key: tuple[str, int]


Command = StoreCall | ObjectCall | FindTime | OpenRead | NextItems | AwaitAhead
Procedure = Generator[Command, Any, Any]


@attrs.define
class Opened:
    """A tiered object's footer and index, read once per object."""

    name: str
    size: int
    footer: Footer
    index: list[Block]


def open_object(name: str, size: int) -> Procedure:
    """Read ``name``'s footer and index (two ranged reads); an ``Opened``."""
    if size < FOOTER_BYTES:
        raise CorruptObject(f"{name}: {size} bytes is no tiered object")
    tail = yield ObjectCall("read", (name, size - FOOTER_BYTES, FOOTER_BYTES))
    footer = parse_footer(tail, size)
    raw = yield ObjectCall("read", (name, footer.index_offset, footer.index_length))
    return Opened(name, size, footer, parse_index(raw, footer))


async def drive(
    proc: Procedure,
    perform: Callable[[Command], Awaitable[Any]],
    thrown: tuple[type[BaseException], ...],
) -> Any:
    """Drive ``proc`` to its end, each command awaited through ``perform``
    (the node's shells: ``_offload``, ``_serve``).  What a step raises of
    ``thrown`` goes into the procedure, which decides; anything else (a
    bug, a cancellation) ends it at once."""
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                cmd = proc.throw(error) if error is not None else proc.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = await perform(cmd)
            except thrown as exc:
                error = exc
    finally:
        proc.close()


def run_now(proc: Procedure, perform: Callable[[Command], Any]) -> Any:
    """Drive ``proc`` to its end at once, each command performed by
    ``perform`` (its exceptions thrown in): for callers whose store blocks
    (tools, tests) rather than a node's event loop."""
    value: Any = None
    error: BaseException | None = None
    try:
        for _ in range(1_000_000):  # bounded: a procedure is a few dozen steps
            try:
                cmd = proc.throw(error) if error is not None else proc.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = perform(cmd)
            except Exception as exc:  # thrown in: the procedure decides
                error = exc
        raise RuntimeError("a tier procedure never ended")
    finally:
        proc.close()

"""The commands that sealing and recovery procedures yield to their driver
(``_procedures``): each ``yield`` hands one over and resumes with its result."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from ..epochstore._base import EpochStore
    from ..wire import Store as StoreMsg


@attrs.frozen
class Ask:
    """Send each request (its ``request_id`` is filled in by the driver) and
    resume with ``{node_id: reply}`` for the nodes that answered: when all
    did, or ``settle_s`` after ``enough(replies)`` first held (at once when
    ``settle_s`` is 0), or at ``timeout_s``."""

    requests: tuple[tuple[int, Any], ...]
    timeout_s: float
    enough: Callable[[Mapping[int, Any]], bool] | None = None
    settle_s: float = 0.0


@attrs.frozen
class Tell:
    """Send one message, expect nothing back (RELEASE)."""

    node_id: int
    message: Any


@attrs.frozen
class StoreCopies:
    """Send a STORE to every node of its copyset, under a fresh store id with
    ``RECOVERY_STORE_BIT`` set; resume with ``{node: status}`` (a node missing
    from the result did not answer within ``timeout_s``)."""

    message: StoreMsg
    timeout_s: float


@attrs.frozen
class EpochStoreCall:
    """Ask the epoch store: resume with ``fn(store)``, or throw what it raised."""

    fn: Callable[[EpochStore], Any]


@attrs.frozen
class Sleep:
    seconds: float


Command = Ask | Tell | StoreCopies | EpochStoreCall | Sleep
Procedure = Generator[Command, Any, Any]

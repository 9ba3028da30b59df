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


# -- what every driver does the same way (the node's trio driver, the simulation) --


@attrs.frozen
class Finished:
    """The procedure ended: with ``value``, or raising ``error``."""

    value: Any = None
    error: BaseException | None = None


def advance(proc: Procedure, value: Any, error: BaseException | None) -> Command | Finished:
    """Resume ``proc`` with the result of its last command (``error``: what
    that command raised, thrown into it): its next command, or its end.  A
    ``LogstrandError`` it raises ends it with that error (a driver reports
    it); anything else is a bug and propagates."""
    from ..errors import LogstrandError

    try:
        return proc.throw(error) if error is not None else proc.send(value)
    except StopIteration as stop:
        return Finished(stop.value)
    except LogstrandError as exc:
        return Finished(None, exc)


class Gathering:
    """The replies to one ``Ask`` or ``StoreCopies``, and when to stop
    waiting for more (the rules of their docstrings): ``add`` each reply as
    it comes; stop when it says so, or at ``deadline`` (which ``enough`` may
    bring closer).  Then ``replies`` is what the procedure resumes with."""

    def __init__(self, cmd: Ask | StoreCopies, now: float) -> None:
        self.cmd = cmd
        if isinstance(cmd, Ask):
            self.expected = frozenset(node for node, _ in cmd.requests)
        else:
            self.expected = frozenset(cmd.message.copyset)
        self.replies: dict[int, Any] = {}
        self.deadline = now + cmd.timeout_s
        self.settling = False

    def add(self, node_id: int, reply: Any, now: float) -> bool:
        """Take ``node_id``'s reply (its first one counts); True when every
        node expected has answered."""
        if node_id not in self.expected:
            return False
        self.replies.setdefault(node_id, reply)
        if len(self.replies) == len(self.expected):
            return True
        cmd = self.cmd
        if not isinstance(cmd, Ask) or cmd.enough is None or self.settling:
            return False
        if cmd.enough(self.replies):
            # Enough answers: wait a little longer for the rest, no more.
            self.settling = True
            self.deadline = min(self.deadline, now + cmd.settle_s)
        return False

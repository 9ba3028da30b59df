"""Users and grants as the epoch store has them, for the fronts that check
them themselves (the Kafka front, the console): read every ``REFRESH_S``,
at once for a name or token not known yet, and before a refusal when they
are older than ``RECHECK_S`` (a new grant counts within ``RECHECK_S``, a
revoked one within ``REFRESH_S``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ..records import LOG_ID_MAX
from ._model import Grant, user_of_token

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: Users and grants are read again after this long.
REFRESH_S = 5.0
#: A request refused reads them again, if they are older than this.
RECHECK_S = 0.5


class Access:
    """``read()`` returns the epoch store's security document (``security()``)."""

    def __init__(self, read: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._read = read
        self.users: dict[str, Any] = {}
        self.grants: tuple[Grant, ...] = ()
        self._read_at = -float("inf")
        self._reading = trio.Lock()

    async def refresh(self, *, force: bool = False) -> None:
        async with self._reading:
            if not force and trio.current_time() - self._read_at < REFRESH_S:
                return
            doc = await self._read()
            self.users = doc["users"]
            self.grants = tuple(Grant.from_json(g) for g in doc["grants"])
            self._read_at = trio.current_time()

    async def user(self, name: str) -> dict[str, Any] | None:
        """The user's entry (its token's hash, SCRAM keys), or None."""
        await self.refresh()
        if name not in self.users:
            await self.refresh(force=True)
        user: dict[str, Any] | None = self.users.get(name)
        return user

    async def user_of_token(self, token: str) -> str | None:
        """The name of the user whose token this is, or None."""
        await self.refresh()
        name = user_of_token(self.users, token)
        if name is None and trio.current_time() - self._read_at >= RECHECK_S:
            await self.refresh(force=True)
            name = user_of_token(self.users, token)
        return name

    async def may_somewhere(self, user: str, op: str) -> bool:
        """Whether ``user`` may ``op`` on at least one log (the console's
        cluster-wide views)."""
        await self.refresh()
        return any(g.user == user and op in g.ops for g in self.grants)

    async def may(self, user: str, op: str, log_id: int | None) -> bool:
        """Whether ``user`` may ``op`` on ``log_id`` (None: on every user log)."""
        await self.refresh()
        if self.allows(user, op, log_id):
            return True
        if trio.current_time() - self._read_at < RECHECK_S:
            return False
        await self.refresh(force=True)
        return self.allows(user, op, log_id)

    def forget(self) -> None:
        """Users and grants changed: read them again at the next question."""
        self._read_at = -float("inf")

    def allows(self, user: str, op: str, log_id: int | None) -> bool:
        if log_id is None:
            return any(
                g.user == user and op in g.ops and (g.first, g.last) == (1, LOG_ID_MAX)
                for g in self.grants
            )
        return any(g.user == user and g.covers(op, log_id) for g in self.grants)

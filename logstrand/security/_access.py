"""Users and grants as the epoch store has them, for the fronts that check
them themselves (the Kafka front, the console): read every ``REFRESH_S``,
again for a name or token not known yet or before a refusal, but never
more often than every ``RECHECK_S`` (a new grant counts within
``RECHECK_S``, a revoked one within ``REFRESH_S``; a flood of logins with
names that do not exist costs one read of the store per ``RECHECK_S``,
not one each)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ._model import NO_GRANTS, Grants, user_of_token

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: Users and grants are read again after this long.
REFRESH_S = 5.0
#: What is not known (a name, a token, a grant) reads them again, if they
#: are older than this.
RECHECK_S = 0.5


class Access:
    """``read()`` returns the epoch store's security document (``security()``)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[dict[str, Any]]],
        name_of: Callable[[int], str | None] = lambda _: None,
    ) -> None:
        self._read = read
        #: The name of the range a log is in (grants by topic name).
        self._name_of = name_of
        self.users: dict[str, Any] = {}
        self.grants: Grants = NO_GRANTS
        #: The cluster's secret for SCRAM's made-up salts (None: not made yet).
        self.sasl_secret: str | None = None
        self._read_at = -float("inf")
        self._reading = trio.Lock()
        #: How many times the document was read (the tests count them).
        self.reads = 0

    async def refresh(self, *, force: bool = False) -> None:
        async with self._reading:
            since = trio.current_time() - self._read_at
            if since < RECHECK_S or (not force and since < REFRESH_S):
                return
            doc = await self._read()
            self.reads += 1
            self.users = doc["users"]
            self.grants = Grants.from_doc(doc)
            self.sasl_secret = doc.get("sasl_secret")
            self._read_at = trio.current_time()

    async def user(self, name: str) -> dict[str, Any] | None:
        """The user's entry (its token's hash, SCRAM keys), or None."""
        await self.refresh()
        if name not in self.users:
            await self.refresh(force=True)  # at most every RECHECK_S
        user: dict[str, Any] | None = self.users.get(name)
        return user

    async def user_of_token(self, token: str) -> str | None:
        """The name of the user whose token this is, or None."""
        await self.refresh()
        name = user_of_token(self.users, token)
        if name is None:
            await self.refresh(force=True)
            name = user_of_token(self.users, token)
        return name

    async def may_somewhere(self, user: str, op: str) -> bool:
        """Whether ``user`` may ``op`` on at least one log (the console's
        cluster-wide views)."""
        await self.refresh()
        return self.grants.may_somewhere(user, op)

    async def may(self, user: str, op: str, log_id: int | None) -> bool:
        """Whether ``user`` may ``op`` on ``log_id`` (None: on every user log)."""
        name = None if log_id is None else self._name_of(log_id)
        await self.refresh()
        if self.grants.may(user, op, log_id, name):
            return True
        await self.refresh(force=True)
        return self.grants.may(user, op, log_id, name)

    async def may_group(self, user: str, op: str, group: str) -> bool:
        """Whether ``user`` may ``op`` on consumer group ``group``."""
        await self.refresh()
        if self.grants.may_group(user, op, group):
            return True
        await self.refresh(force=True)
        return self.grants.may_group(user, op, group)

    async def may_txn(self, user: str, op: str, txn_id: str) -> bool:
        """Whether ``user`` may ``op`` (write, describe) with transactional
        id ``txn_id``."""
        await self.refresh()
        if self.grants.may_txn(user, op, txn_id):
            return True
        await self.refresh(force=True)
        return self.grants.may_txn(user, op, txn_id)

    def forget(self) -> None:
        """Users and grants changed: read them again at the next question."""
        self._read_at = -float("inf")

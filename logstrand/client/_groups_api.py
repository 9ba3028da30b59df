"""The client's consumer groups' positions (``positions.Groups``): a part
of ``AsyncClient``; membership is ``subscribe`` (``_subscribe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import POSITIONS_LOGS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..positions import GroupLag, Position
    from ..positions._client import Groups


class GroupsApi:
    """``AsyncClient``'s consumer groups."""

    _groups: Groups

    if TYPE_CHECKING:  # ``AsyncClient``'s, which the lags need

        async def tail_lsns(self, log_ids: Sequence[int]) -> dict[int, int]: ...

    async def commit(self, group: str, log_id: int, lsn: int) -> int:
        """Record that ``group`` has processed ``log_id`` up to and including
        ``lsn`` (docs/groups.md).  Returns the LSN of the position's record
        in the positions log.

        Raises:
            InvalidArgumentError: a bad group name or LSN.
            NotFoundError: the log does not exist.
        """
        return await self._groups.commit(group, log_id, lsn)

    async def committed(self, group: str, log_id: int) -> int | None:
        """The LSN ``group`` last committed on ``log_id``; None: none."""
        position = await self._groups.committed(group, log_id)
        return None if position is None else position.lsn

    async def group_positions(
        self, logs: Sequence[int] = POSITIONS_LOGS
    ) -> dict[str, list[Position]]:
        """Every consumer group and its positions (one per log); ``logs``:
        only the groups that these positions logs hold."""
        return await self._groups.positions(logs)

    async def describe_group(self, group: str) -> list[GroupLag]:
        """The group's position, the tail and the lag on each of its logs.

        Raises:
            NotFoundError: the group has no positions.
        """
        return await self._groups.describe(group)

    async def group_lags(
        self, positions: Mapping[str, Sequence[Position]]
    ) -> dict[str, list[GroupLag]]:
        """``describe_group`` of many groups at once, from their positions as
        ``group_positions`` gave them: the logs' tails in one ``tail_lsns``.

        Raises:
            NotFoundError: a log of a position does not exist.
        """
        logs = sorted({p.log_id for held in positions.values() for p in held})
        tails = await self.tail_lsns(logs) if logs else {}
        return await self._groups.lags(positions, tails)

    async def group_membership(self, group: str) -> dict[str, Any] | None:
        """The members of a group with membership (a Kafka consumer group), as
        its coordinator last wrote them down; None for a group of positions only."""
        return await self._groups.membership(group)

    async def reset_group(
        self, group: str, log_id: int, how: str, value: int | None = None, *, dry_run: bool = False
    ) -> tuple[int | None, int]:
        """Move the group's position (``how``: lsn, time, earliest, latest);
        (committed before, committed after).  See ``Groups.reset``."""
        return await self._groups.reset(group, log_id, how, value, dry_run=dry_run)

    async def delete_group(self, group: str) -> list[int]:
        """Remove every position of ``group``; the logs it had positions on.

        Raises:
            NotFoundError: the group has no positions.
        """
        return await self._groups.delete(group)

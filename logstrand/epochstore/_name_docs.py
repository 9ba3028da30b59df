"""Named ranges that grow: the epoch store's side of ``_named`` (a name
over several ranges, Kafka's CreatePartitions at any time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ExistsError, InvalidArgumentError, NotFoundError
from ._model import LogAttributes, LogRange

if TYPE_CHECKING:
    from collections.abc import Callable


class NameDocs:
    """Mixed into ``EpochStore``: needs its ``_update`` and ``_check_placeable``."""

    _update: Callable[[str, Callable[[Any], Any]], Any]
    _check_placeable: Callable[[LogAttributes], None]

    def extend_logs(self, first: int, last: int, new_last: int) -> LogRange:
        """Grow the range ``first..last`` to ``first..new_last``, keeping its
        attributes and name.

        Raises:
            NotFoundError: no range is exactly ``first..last``.
            ExistsError: an id in ``last+1..new_last`` is in another range.
            InvalidArgumentError: ``new_last`` does not grow it.
        """
        if new_last <= last:
            raise InvalidArgumentError(f"logs {first}..{last}: {new_last} does not grow the range")
        result: list[LogRange] = []

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            grown = None
            for i, r in enumerate(ranges):
                if (r.first, r.last) == (first, last):
                    grown = ranges[i] = LogRange(first, new_last, r.attributes, r.name)
            if grown is None:
                raise NotFoundError(f"no log range {first}..{last}")
            _check_free(ranges, grown, but=grown)
            result.append(grown)
            return [r.to_json() for r in ranges]

        self._update("logs", change)
        return result[0]

    def add_logs_part(self, name: str, first: int, last: int) -> LogRange:
        """A new part ``first..last`` of the name: the name's attributes, and
        above every part it has (so partition order is the order parts are
        made in).

        Raises:
            NotFoundError: no range has that name.
            ExistsError: an id of ``first..last`` is in another range.
            InvalidArgumentError: ``first`` is not above the name's parts.
        """
        result: list[LogRange] = []

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            parts = [r for r in ranges if r.name == name]
            if not parts:
                raise NotFoundError(f"no log range is named {name!r}")
            top = max(r.last for r in parts)
            if first <= top:
                raise InvalidArgumentError(
                    f"a new part of {name!r} starts above its logs (past {top}), not at {first}"
                )
            new = LogRange(first, last, parts[0].attributes, name)
            _check_free(ranges, new)
            ranges.append(new)
            ranges.sort(key=lambda r: r.first)
            result.append(new)
            return [r.to_json() for r in ranges]

        self._update("logs", change)
        return result[0]

    def update_logs_named(self, name: str, **changes: Any) -> list[LogRange]:
        """Change the attributes of every part of the name at once.

        Raises:
            NotFoundError: no range has that name.
            InvalidArgumentError: an unknown attribute or a bad value.
        """
        result: list[LogRange] = []

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            result.clear()
            for i, r in enumerate(ranges):
                if r.name == name:
                    merged = LogAttributes.from_json({**r.attributes.to_json(), **changes})
                    self._check_placeable(merged)
                    ranges[i] = LogRange(r.first, r.last, merged, name)
                    result.append(ranges[i])
            if not result:
                raise NotFoundError(f"no log range is named {name!r}")
            return [x.to_json() for x in ranges]

        self._update("logs", change)
        return result

    def remove_logs_named(self, name: str) -> list[LogRange]:
        """Remove every part of the name (epoch state stays, as for
        ``remove_logs``) and return them.

        Raises:
            NotFoundError: no range has that name.
        """
        removed: list[LogRange] = []

        def change(doc: Any) -> Any:
            ranges = [LogRange.from_json(d) for d in doc or []]
            removed[:] = [r for r in ranges if r.name == name]
            if not removed:
                raise NotFoundError(f"no log range is named {name!r}")
            return [r.to_json() for r in ranges if r.name != name]

        self._update("logs", change)
        return removed


def _check_free(ranges: list[LogRange], new: LogRange, *, but: LogRange | None = None) -> None:
    for r in ranges:
        if r is not but and r.overlaps(new):
            raise ExistsError(f"logs {new.first}..{new.last} overlap the range {r.first}..{r.last}")

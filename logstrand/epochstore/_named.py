"""A name over one or more log ranges: what the Kafka front serves as a topic
and what the client appends to by name.  Pure.

A name starts as one range (``logs create 100..103 --name orders``).  It
grows by a range of its own when the ids after its last range are taken
(Kafka's CreatePartitions after another topic was made): the ranges of a
name are its *parts*, and its logs, in order, are the parts' logs in the
order of their first ids.  The epoch store keeps every part above the ones
before it (``EpochStore.add_logs_part``), so that order is the order the
parts were made in, and partition *i* stays the same log for good.

Every part has the same attributes: changes go to all of them at once
(``EpochStore.update_logs_named``).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._model import LogAttributes, LogRange


@attrs.frozen
class NamedLogs:
    """The parts of one name, in partition order (see the module docstring)."""

    name: str
    parts: tuple[LogRange, ...]
    #: Partition index of each part's first log (same order as ``parts``).
    _starts: tuple[int, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        starts, at = [], 0
        for r in self.parts:
            starts.append(at)
            at += r.last - r.first + 1
        object.__setattr__(self, "_starts", tuple(starts))

    @property
    def first(self) -> int:
        """The first log of the first part (what a topic's id is made of)."""
        return self.parts[0].first

    @property
    def attributes(self) -> LogAttributes:
        return self.parts[0].attributes

    @property
    def count(self) -> int:
        """How many logs (Kafka: partitions) the name has."""
        last = self.parts[-1]
        return self._starts[-1] + last.last - last.first + 1

    def log(self, index: int) -> int | None:
        """The log of partition ``index``, or None past the end."""
        if not 0 <= index < self.count:
            return None
        i = bisect.bisect_right(self._starts, index) - 1
        return self.parts[i].first + index - self._starts[i]

    def index(self, log_id: int) -> int | None:
        """The partition ``log_id`` is, or None when it is not the name's."""
        for r, start in zip(self.parts, self._starts, strict=True):
            if log_id in r:
                return start + log_id - r.first
        return None

    def logs(self) -> list[int]:
        """Every log of the name, in partition order."""
        return [i for r in self.parts for i in range(r.first, r.last + 1)]

    def __contains__(self, log_id: object) -> bool:
        return any(log_id in r for r in self.parts)


def named_logs(ranges: Iterable[LogRange]) -> dict[str, NamedLogs]:
    """Every name of ``ranges`` and its parts."""
    parts: dict[str, list[LogRange]] = {}
    for r in ranges:
        if r.name is not None:
            parts.setdefault(r.name, []).append(r)
    return {n: NamedLogs(n, tuple(sorted(p, key=lambda r: r.first))) for n, p in parts.items()}


class NamedCache:
    """``named_logs`` of a view's ranges, made again only when the view read
    the configuration again (its ``ranges`` is then a new list): a front
    asks for a topic on every request."""

    def __init__(self) -> None:
        self._of: object = None
        self._named: dict[str, NamedLogs] = {}

    def __call__(self, ranges: list[LogRange]) -> dict[str, NamedLogs]:
        if ranges is not self._of:
            self._named, self._of = named_logs(ranges), ranges
        return self._named

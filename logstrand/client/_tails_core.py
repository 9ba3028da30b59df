"""What ``tail_lsns`` makes of the nodes' ``TailsReply``s.  Pure.

``_tails.tail_lsns`` sends each node one ``GetTails`` per chunk of logs and
hands every answer (or its absence) to a ``TailsTally``; the tally keeps
rule 1 (a log's tail is the highest number any node gave) and decides
rule 2 (which logs must be asked alone, through their sequencer).  The
rules are in ``_tails``' docstring; tests/unit/test_tails_core.py tests
each one alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..wire import TAILS_FIELDS, TAILS_LOGS_MAX

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


def chunked(logs: Sequence[int], size: int = TAILS_LOGS_MAX) -> list[tuple[int, ...]]:
    """The logs in requests of at most ``size`` (a node's bound on one)."""
    return [tuple(logs[i : i + size]) for i in range(0, len(logs), size)]


class TailsTally:
    """The tails of ``logs`` as the answers of ``storage`` nodes (and of
    nodes that only run sequencers) come in, ``chunks`` requests a node."""

    def __init__(self, logs: Sequence[int], storage: Iterable[int], chunks: int) -> None:
        self.tails = dict.fromkeys(logs, 0)
        self._released = dict.fromkeys(logs, 0)
        self._sequenced: set[int] = set()
        self._storage = frozenset(storage)
        self._chunks = chunks
        #: node -> how many of its chunks it answered in full.
        self._answered: dict[int, int] = {}

    def take(self, node: int, chunk: Sequence[int], entries: Sequence[int]) -> bool:
        """One node's answer for ``chunk``: ``TAILS_FIELDS`` numbers a log
        (has a sequencer, its acknowledged tail, the release pointer, the
        highest LSN stored).  An answer of the wrong length counts as none
        (False): a node that does not answer in full leaves its logs'
        tails in doubt (rule 2)."""
        if len(entries) != len(chunk) * TAILS_FIELDS:
            return False
        self._answered[node] = self._answered.get(node, 0) + 1
        for i, log in enumerate(chunk):
            has, acked, release, last = entries[i * TAILS_FIELDS : (i + 1) * TAILS_FIELDS]
            # Rule 1: every number here is at or below the log's true tail,
            # and the highest of them covers every acknowledged append once
            # a sequencer or every storage node answered.
            self.tails[log] = max(self.tails[log], acked, release, last)
            self._released[log] = max(self._released[log], release)
            if has:
                self._sequenced.add(log)
        return True

    def alone(self) -> list[int]:
        """Rule 2: the logs to ask alone (``tail_lsn``, which activates a
        sequencer): no sequencer of the log answered, and a storage node
        did not answer in full, or a node holds copies above every release
        pointer (they wait for a recovery that a reader would wait for)."""
        everyone = all(self._answered.get(n, 0) == self._chunks for n in self._storage)
        return [
            log
            for log, tail in self.tails.items()
            if log not in self._sequenced and (not everyone or self._released[log] < tail)
        ]

"""Copyset selection: R distinct nodes of a nodeset, at random, weighted,
spread over failure domains.

Rules:

1. Never two copies on one node.
2. With a scope wider than ``node``, never two copies in one failure domain
   of that scope, while the candidates span at least R domains.
3. Nodes in ``exclude`` (failed or slow in an earlier wave, known dead) are
   not picked; if too few remain, selection fails and the caller waits.

Weighted sampling without replacement: each pick takes a node with
probability proportional to its weight among the remaining candidates, then
removes every candidate of the same domain.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping


class CopysetSelector:
    """Picks copysets for one nodeset.  Deterministic for a given ``rng``."""

    def __init__(
        self,
        nodeset: tuple[int, ...],
        replication: int,
        *,
        weights: Mapping[int, float] | None = None,
        domains: Mapping[int, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= replication <= len(nodeset):
            raise ValueError(f"cannot place {replication} copies on nodeset {nodeset}")
        self.nodeset = nodeset
        self.replication = replication
        self._weights = {n: (weights or {}).get(n, 1.0) for n in nodeset}
        self._domains = {n: (domains or {}).get(n, f"node{n}") for n in nodeset}
        self._rng = rng or random.Random()

    def select(self, exclude: Collection[int] = ()) -> tuple[int, ...] | None:
        """R nodes for the next copyset, or None when the rules cannot be met."""
        candidates = [n for n in self.nodeset if n not in exclude and self._weights[n] > 0]
        picked: list[int] = []
        while len(picked) < self.replication:
            if not candidates:
                return None
            total = sum(self._weights[n] for n in candidates)
            x = self._rng.random() * total
            choice = candidates[-1]
            for n in candidates:
                x -= self._weights[n]
                if x < 0:
                    choice = n
                    break
            picked.append(choice)
            dom = self._domains[choice]
            candidates = [n for n in candidates if self._domains[n] != dom]
        return tuple(picked)

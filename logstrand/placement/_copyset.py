"""Copyset selection: R distinct nodes of a nodeset, at random, weighted,
spread over failure domains.

Rules:

1. Never two copies on one node.
2. With a scope wider than ``node``, never two copies in one failure domain
   of that scope, while the candidates span at least R domains.
3. Nodes in ``exclude`` (failed or slow in an earlier wave, known dead) are
   not picked; if too few remain, selection fails and the caller waits.
4. ``local`` (the node running the sequencer) is picked first whenever it
   is a candidate: its copy is a write into its own queue, not a network
   round trip, so an append waits for R-1 peers instead of R.  It comes
   last in the copyset, so the STOREs to peers leave before the local write
   takes the node's loop.

Weighted sampling without replacement: each pick takes a node with
probability proportional to its weight among the remaining candidates, then
removes every candidate of the same domain.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping


_SHARED_RNG = random.Random()


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
        local: int | None = None,
    ) -> None:
        if not 1 <= replication <= len(nodeset):
            raise ValueError(f"cannot place {replication} copies on nodeset {nodeset}")
        self.nodeset = nodeset
        self.replication = replication
        self._weights = {n: (weights or {}).get(n, 1.0) for n in nodeset}
        self._domains = {n: (domains or {}).get(n, f"node{n}") for n in nodeset}
        # One generator for every selector without its own: a Random's state
        # is 2.5 KB, and a node keeps a selector per active sequencer.
        self._rng = rng or _SHARED_RNG
        self.local = local

    def select(self, exclude: Collection[int] = ()) -> tuple[int, ...] | None:
        """R nodes for the next copyset, or None when the rules cannot be met."""
        candidates = [n for n in self.nodeset if n not in exclude and self._weights[n] > 0]
        picked: list[int] = []
        local = self.local
        if local is not None and local in candidates:  # rule 4
            dom = self._domains[local]
            candidates = [n for n in candidates if self._domains[n] != dom]
            picked.append(local)
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
        if picked[0] == local:
            return (*picked[1:], local)
        return tuple(picked)

"""Weighted rendezvous hashing: every client and node agrees, with no coordination,
on which live node runs a log's sequencer, and which nodes make a log's nodeset.

For each (log, node) pair a hash h in (0, 1) gives the score
``-weight / ln(h)``; the highest score wins.  A node's share of logs is
proportional to its weight, and when a node dies only its logs move.
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

_TWO64 = float(2**64)


def _unit_hash(log_id: int, node_id: int, salt: bytes) -> float:
    digest = hashlib.blake2b(
        log_id.to_bytes(8, "big") + node_id.to_bytes(4, "big") + salt, digest_size=8
    ).digest()
    # Map to (0, 1), never 0 or 1, so that log() is finite and negative.
    return (int.from_bytes(digest, "big") + 0.5) / _TWO64


def rendezvous_rank(
    log_id: int, weights: Mapping[int, float], *, salt: bytes = b"seq"
) -> list[int]:
    """Node ids ordered by score for ``log_id``, best first (zero-weight nodes last)."""

    def score(node: int) -> float:
        w = weights[node]
        if w <= 0:
            return -math.inf
        return -w / math.log(_unit_hash(log_id, node, salt))

    return sorted(weights, key=lambda n: (score(n), -n), reverse=True)


def rendezvous_owner(log_id: int, weights: Mapping[int, float]) -> int | None:
    """The node that runs ``log_id``'s sequencer among ``weights`` (live nodes), or None."""
    ranked = [n for n in rendezvous_rank(log_id, weights) if weights[n] > 0]
    return ranked[0] if ranked else None


def select_nodeset(
    log_id: int,
    weights: Mapping[int, float],
    domains: Mapping[int, str],
    *,
    size: int | None,
    replication: int,
) -> tuple[int, ...]:
    """A deterministic nodeset of ``size`` storage nodes (all of them for None).

    The size is raised to ``replication`` if needed and the set is spread so
    that it spans at least ``replication`` failure domains when the cluster
    has them.  The same inputs always give the same nodeset, so a sequencer
    that is re-activated does not change placement needlessly.
    """
    nodes = sorted(n for n, w in weights.items() if w > 0)
    want = len(nodes) if size is None else min(max(size, replication), len(nodes))
    ranked = [n for n in rendezvous_rank(log_id, weights, salt=b"nodeset") if weights[n] > 0]
    chosen: list[int] = []
    seen: set[str] = set()
    # First one node per domain, best ranked first, until R domains are covered.
    for n in ranked:
        if len(seen) >= replication or len(chosen) >= want:
            break
        if domains.get(n, str(n)) not in seen:
            seen.add(domains.get(n, str(n)))
            chosen.append(n)
    for n in ranked:
        if len(chosen) >= want:
            break
        if n not in chosen:
            chosen.append(n)
    return tuple(sorted(chosen))

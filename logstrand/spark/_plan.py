"""Cutting logs into LSN ranges of similar size (pure: no pyspark, no trio).

What the planner knows of a log: the range to read ``[start, end)`` (from the
options and the tail LSN), the nodes' partition directory entries
(``LogSegment``: an LSN range with its records and bytes; every record is
counted in R nodes' entries), and, for a range that spans epochs, where each
epoch ended (recovery records that in the epoch store).

From the directories it estimates how many records each log holds in its
range and shares the partitions among the logs in proportion (at least one per
non-empty range, at least ``min_partitions`` in all, none over ``max_records``
by the estimate).  Then it cuts each log by record position: ESNs are dense
inside an epoch, so the LSNs ``(e, 1) .. (e, end of e)`` are records; LSNs jump
by 2^32 between epochs, which the cut skips over instead of splitting them
evenly as numbers.

Any cut points make a correct plan (the ranges cover ``[start, end)`` exactly,
without overlap); the estimates only decide how even it is.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import attrs

from ..types import compose_lsn, lsn_epoch

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..client import LogSegment


@attrs.frozen
class Range:
    """LSNs ``lo`` (included) to ``hi`` (excluded) of one log."""

    log_id: int
    lo: int
    hi: int


def _overlap(seg: LogSegment, start: int, end: int) -> float:
    """Fraction of a segment's records inside [start, end) (an estimate)."""
    a, b = seg.first_lsn, seg.last_lsn
    if b < start or a >= end:
        return 0.0
    if a >= start and b < end:
        return 1.0
    if lsn_epoch(a) == lsn_epoch(b) and b > a:
        lo, hi = max(a, start), min(b, end - 1)
        return (hi - lo + 1) / (b - a + 1)
    return 0.5


def estimate_records(segments: Sequence[LogSegment], start: int, end: int, copies: int) -> float:
    """Records of the log in [start, end), from the nodes' directories."""
    total = sum(s.records * _overlap(s, start, end) for s in segments)
    return total / max(1, copies)


def share(estimates: Mapping[int, float], min_partitions: int, max_records: int) -> dict[int, int]:
    """How many partitions each log gets (logs with nothing estimated get one)."""
    if not estimates:
        return {}
    total = sum(estimates.values())
    want = max(min_partitions, math.ceil(total / max_records), len(estimates))
    if total <= 0:
        return dict.fromkeys(estimates, 1)
    # Largest remainder over the logs' shares, at least one each.
    raw = {log: want * est / total for log, est in estimates.items()}
    out = {log: max(1, math.floor(r)) for log, r in raw.items()}
    spare = want - sum(out.values())
    for log in sorted(raw, key=lambda g: raw[g] - math.floor(raw[g]), reverse=True):
        if spare <= 0:
            break
        out[log] += 1
        spare -= 1
    return out


#: Epochs a range may span and still be cut by their extents (each costs an
#: epoch store read when planning).
EPOCHS_MAX = 4096


def _pieces(start: int, end: int, extents: Mapping[int, int]) -> list[tuple[int, int]]:
    """[start, end) as single-epoch pieces whose LSNs are all records (dense
    ESNs): epoch ``e`` holds ESNs 1 .. ``extents[e]`` - 1; an epoch with no
    known extent counts as empty, except the last, which runs to ``end``."""
    first, last = lsn_epoch(start), lsn_epoch(end - 1)
    out = []
    for e in range(first, last + 1):
        lo = max(start, compose_lsn(e, 1))
        ext = extents.get(e)
        if e == last:
            hi = end if ext is None else min(end, compose_lsn(e, 0) + ext)
        else:
            hi = lo if ext is None else min(end, compose_lsn(e, 0) + ext)
        if hi > lo:
            out.append((lo, hi))
    return out


def cut(
    log_id: int, start: int, end: int, parts: int, extents: Mapping[int, int] | None = None
) -> list[Range]:
    """Cut ``[start, end)`` of one log into up to ``parts`` ranges of similar
    record counts, given the extents of the epochs it spans (see ``_pieces``)."""
    if end <= start:
        return []
    points: list[int] = []
    if parts > 1:
        pieces = _pieces(start, end, extents or {})
        total = sum(hi - lo for lo, hi in pieces)
        goals = sorted({round(total * k / parts) for k in range(1, parts)})
        at, i = 0, 0
        for lo, hi in pieces:
            while i < len(goals) and goals[i] < at + (hi - lo):
                points.append(lo + goals[i] - at)
                i += 1
            at += hi - lo
    inner = sorted({p for p in points if start < p < end})
    bounds = [start, *inner, end]
    return [Range(log_id, lo, hi) for lo, hi in itertools.pairwise(bounds)]


def plan(
    ranges: Mapping[int, tuple[int, int]],
    segments: Mapping[int, Sequence[LogSegment]],
    copies: Mapping[int, int],
    *,
    min_partitions: int,
    max_records: int,
    extents: Callable[[int, int, int], Mapping[int, int]],
) -> list[Range]:
    """Every log's ``[start, end)`` cut into ranges of similar estimated size."""
    live = {log: r for log, r in ranges.items() if r[1] > r[0]}
    estimates = {
        log: estimate_records(segments.get(log, ()), lo, hi, copies.get(log, 1))
        for log, (lo, hi) in live.items()
    }
    counts = share(estimates, min_partitions, max_records)
    out: list[Range] = []
    for log in sorted(live):
        lo, hi = live[log]
        spans_epochs = lsn_epoch(lo) != lsn_epoch(hi - 1)
        known = extents(log, lo, hi) if counts[log] > 1 and spans_epochs else {}
        out += cut(log, lo, hi, counts[log], known)
    return out

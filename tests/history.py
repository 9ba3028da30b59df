"""A history of clients' operations against a cluster, and the checker that
judges it (Jepsen style): what was appended, when, with what result, and
what each reader saw.

Every appended payload is unique.  An append's result is ``ok`` (an LSN),
or *indeterminate* (an error or a timeout: it may be in the log or not, but
at most once).  ``check`` returns the violations found, each one line:

1. every acknowledged append is read, at its LSN, with its payload;
2. no record is read that no client appended;
3. all readers see one order: each reader's LSNs increase, and readers
   agree on the payload at every LSN they both read;
4. an append acknowledged before another was sent (to the same log) has
   the lower LSN;
5. no payload is in the log twice (idempotent appends), and no reader
   delivers one twice;
6. no reader reports data lost (DATALOSS, CHECKSUM_FAIL): a partition
   makes copies unreachable, never gone.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable

#: Violations reported per kind at most (the count of the rest follows).
SHOWN = 5
LOSS = ("DATALOSS", "CHECKSUM_FAIL")


@attrs.define
class Append:
    client: str
    log: int
    payload: bytes
    sent: float
    done: float = 0.0
    lsn: int | None = None  # acknowledged at
    error: str | None = None  # indeterminate: why


@attrs.define
class History:
    appends: list[Append] = attrs.Factory(list)
    #: reader name -> the (log, lsn, payload) it delivered, in delivery order.
    reads: dict[str, list[tuple[int, int, bytes]]] = attrs.Factory(dict)
    #: (reader, log, gap type name, lo, hi) of every gap a reader reported.
    gaps: list[tuple[str, int, str, int, int]] = attrs.Factory(list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)

    def add(self, op: Append) -> None:
        with self._lock:
            self.appends.append(op)

    def reader(self, name: str) -> list[tuple[int, int, bytes]]:
        with self._lock:
            return self.reads.setdefault(name, [])

    @property
    def acknowledged(self) -> int:
        return sum(1 for a in self.appends if a.lsn is not None)

    @property
    def indeterminate(self) -> int:
        return sum(1 for a in self.appends if a.lsn is None)


def check(history: History, final: str = "final") -> list[str]:
    """The violations of ``history``; ``final`` names the reader that read
    every log from its start to its tail after the run (rule 1 uses it)."""
    out: dict[str, list[str]] = defaultdict(list)
    appended = {a.payload: a for a in history.appends}
    at: dict[tuple[int, int], tuple[bytes, str]] = {}
    for name, items in history.reads.items():
        last: dict[int, int] = {}
        seen: set[bytes] = set()
        for log, lsn, payload in items:
            a = appended.get(payload)
            if a is None or a.log != log:
                out["phantom"].append(f"{name} read {payload!r} at {log}/{lsn:#x}: never appended")
            if lsn <= last.get(log, 0):
                out["order"].append(f"{name}: log {log}: {lsn:#x} after {last[log]:#x}")
            last[log] = lsn
            if payload in seen:
                out["duplicate"].append(f"{name}: {payload!r} delivered twice")
            seen.add(payload)
            other = at.setdefault((log, lsn), (payload, name))
            if other[0] != payload:
                out["disagree"].append(
                    f"log {log} at {lsn:#x}: {other[1]} read {other[0]!r}, {name} read {payload!r}"
                )
    final_items = history.reads.get(final, [])
    final_at = {(log, lsn): payload for log, lsn, payload in final_items}
    counts: dict[bytes, int] = defaultdict(int)
    for _, _, payload in final_items:
        counts[payload] += 1
    for a in history.appends:
        if counts[a.payload] > 1:
            out["duplicate"].append(f"{a.payload!r} is in log {a.log} {counts[a.payload]} times")
        if a.lsn is None:
            continue
        got = final_at.get((a.log, a.lsn))
        if got != a.payload:
            what = "nothing" if got is None else repr(got)
            out["lost"].append(
                f"{a.client}: {a.payload!r} acknowledged at {a.log}/{a.lsn:#x}; read {what}"
            )
    out["realtime"] = _realtime(history.appends)
    for name, log, kind, lo, hi in history.gaps:
        if kind in LOSS:
            out["loss"].append(f"{name}: log {log}: {kind} {lo:#x}..{hi:#x}")
    lines: list[str] = []
    for kind, found in out.items():
        lines += [f"{kind}: {x}" for x in found[:SHOWN]]
        if len(found) > SHOWN:
            lines.append(f"{kind}: ... and {len(found) - SHOWN} more")
    return lines


def _realtime(appends: Iterable[Append]) -> list[str]:
    """Rule 4, per log: sorted by sending time, an acknowledged append's LSN
    is above that of every append acknowledged before it was sent."""
    found = []
    by_log: dict[int, list[Append]] = defaultdict(list)
    for a in appends:
        if a.lsn is not None:
            by_log[a.log].append(a)
    for log, ops in by_log.items():
        done_order = sorted(ops, key=lambda a: a.done)
        i = 0
        best: Append | None = None  # the highest LSN acknowledged so far
        for b in sorted(ops, key=lambda a: a.sent):
            while i < len(done_order) and done_order[i].done < b.sent:
                c = done_order[i]
                if best is None or (c.lsn or 0) > (best.lsn or 0):
                    best = c
                i += 1
            if best is not None and (b.lsn or 0) <= (best.lsn or 0):
                found.append(
                    f"log {log}: {b.payload!r} sent after {best.payload!r} was acknowledged "
                    f"at {best.lsn:#x}, but got {b.lsn:#x}"
                )
    return found

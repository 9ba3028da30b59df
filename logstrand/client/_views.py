"""What a reader makes of the stored batches a node sends: a ``BatchView`` is
one packed batch cut to its window, with the LSN and flag columns the merge
needs, and keys, payloads and timestamps decoded only when asked for.  Pure.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import attrs

from ..records import CONTROL, FLAGS_APPENDED

if TYPE_CHECKING:
    from ..batch import PackedBatch


class BatchView:
    """The records of ``packed`` with lo ≤ LSN ≤ hi, as columns."""

    __slots__ = ("_a", "_kp", "_ts", "_x", "flags", "lsns", "packed", "wave")

    def __init__(self, packed: PackedBatch, lo: int, hi: int) -> None:
        self.packed = packed
        self.wave = packed.wave
        lsns = packed.lsns()
        a = 0 if lo <= packed.first_lsn else bisect.bisect_left(lsns, lo)
        z = len(lsns) if hi >= packed.last_lsn else bisect.bisect_right(lsns, hi)
        self._a = a
        self.lsns = lsns[a:z] if (a or z < len(lsns)) else lsns
        self.flags = packed.flags()[a:z]
        self._ts: list[int] | None = None
        self._kp: tuple[list[bytes | None], list[bytes | None]] | None = None
        self._x: list[bytes | None] | None = None

    def __len__(self) -> int:
        return len(self.lsns)

    @property
    def start(self) -> int:
        """The index in ``packed`` of this view's first record."""
        return self._a

    @property
    def timestamps_ms(self) -> list[int]:
        if self._ts is None:
            self._ts = self.packed.timestamps()[self._a : self._a + len(self.lsns)]
        return self._ts

    def _keys_payloads(self) -> tuple[list[bytes | None], list[bytes | None]]:
        if self._kp is None:
            keys, payloads = self.packed.keys_payloads()
            a, z = self._a, self._a + len(self.lsns)
            if a or z < len(keys):
                keys, payloads = keys[a:z], payloads[a:z]
            self._kp = keys, payloads
        return self._kp

    @property
    def keys(self) -> list[bytes | None]:
        return self._keys_payloads()[0]

    @property
    def payloads(self) -> list[bytes | None]:
        return self._keys_payloads()[1]

    @property
    def extras(self) -> list[bytes | None] | None:
        """Every record's extras (``batch.pack_extra``), or None: none has any."""
        if self._x is None:
            extras = self.packed.extras()
            if extras is None:
                return None
            a, z = self._a, self._a + len(self.lsns)
            self._x = extras[a:z] if (a or z < len(extras)) else extras
        return self._x

    @property
    def payload_bytes(self) -> int:
        if len(self.lsns) == self.packed.count:
            return self.packed.payload_bytes
        lens = self.packed.payload_lens()[self._a : self._a + len(self.lsns)]
        return sum(lens) + lens.count(-1)


class RecordRun:
    """Consecutive delivered records: records [off, end) of a batch view
    (payload None: a tombstone).  Columns are cut from the view on demand."""

    __slots__ = ("end", "off", "view")

    def __init__(self, view: BatchView, off: int, end: int) -> None:
        self.view = view
        self.off = off
        self.end = end

    def __len__(self) -> int:
        return self.end - self.off

    def _cut(self, col: list[Any]) -> list[Any]:
        if self.off == 0 and self.end == len(col):
            return col
        return col[self.off : self.end]

    @property
    def lsns(self) -> list[int]:
        return self._cut(self.view.lsns)

    @property
    def last_lsn(self) -> int:
        return int(self.view.lsns[self.end - 1])

    @property
    def timestamps_ms(self) -> list[int]:
        return self._cut(self.view.timestamps_ms)

    @property
    def keys(self) -> list[bytes | None]:
        return self._cut(self.view.keys)

    @property
    def payloads(self) -> list[bytes | None]:
        return self._cut(self.view.payloads)

    @property
    def extras(self) -> list[bytes | None] | None:
        """Every record's headers and create time, packed, or None: none has any."""
        extras = self.view.extras
        return None if extras is None else self._cut(extras)

    @property
    def txn_flags(self) -> int:
        """TRANSACTIONAL or CONTROL (or 0): what the run's records are.  An
        appender flags a whole batch, so the batch's first record's flags
        say it for the run."""
        return self.view.packed.flags0 & FLAGS_APPENDED


def without_markers(items: list[Any]) -> list[Any]:
    """``items`` without the runs of transactions' markers (CONTROL): what
    a reader delivers to an application."""
    if not any(getattr(i, "txn_flags", 0) & CONTROL for i in items):
        return items
    return [i for i in items if not getattr(i, "txn_flags", 0) & CONTROL]


@attrs.frozen
class LogSegment:
    """What one partition of one node holds of a log (above its trim point):
    an LSN range, its timestamps, and the bytes and records of the copies."""

    node_id: int
    first_lsn: int
    last_lsn: int
    min_ts_ms: int
    max_ts_ms: int
    bytes: int
    records: int

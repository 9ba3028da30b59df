"""What a reader's core says and keeps per node: the items it delivers, the
actions it asks of its shell, and its view of each node's stream.  Pure."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import attrs

from ..records import precedence
from ._views import RecordRun

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..types import GapType
    from ._views import BatchView


@attrs.frozen
class GapItem:
    type: GapType
    lo: int
    hi: int


Item = RecordRun | GapItem


@attrs.frozen
class StartStream:
    node_id: int
    generation: int
    start_lsn: int
    until_lsn: int
    credit: int
    scd: bool
    known_down: tuple[int, ...]


@attrs.frozen
class GrantCredit:
    node_id: int
    generation: int
    records: int


@attrs.frozen
class StopStream:
    """The node is no longer in the log's placement: its stream may stop."""

    node_id: int


Action = StartStream | GrantCredit | StopStream


@attrs.define(eq=False)
class NodeStream:
    pos: int = 0  # everything below this was sent (0: nothing heard yet)
    trim: int = 0
    clean: int = 0  # compaction's clean point: missing at or below it = COMPACTED
    floor: int = 0  # a tiered log's local floor: at or below it, read the object store
    # (batch, offset of its next record)
    queue: deque[tuple[BatchView, int]] = attrs.Factory(deque)
    consumed: int = 0
    moved_at: float = 0.0
    window: int = 0  # credit granted since the stream started, less what came back
    # (first, last) LSNs whose copies this node reported unreadable, this generation
    unreadable: list[tuple[int, int]] = attrs.Factory(list)


def grants(nodes: Mapping[int, NodeStream], generation: int, target: int) -> list[GrantCredit]:
    """Credit for the nodes whose window is half spent: what they used,
    and the window grown to ``target`` records."""
    out = []
    for n, st in nodes.items():
        if st.consumed >= st.window // 2:
            grow = max(0, target - st.window)
            out.append(GrantCredit(n, generation, st.consumed + grow))
            st.window += grow
            st.consumed = 0
    return out


def copy_precedence(batch: BatchView, i: int) -> tuple[int, int]:
    """Which of two differing copies of one LSN wins (``records.precedence``)."""
    return precedence(batch.flags[i], batch.wave)

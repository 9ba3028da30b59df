"""A node's maintenance pass (``storage._upkeep``): what it reads and hands
to its LogsDB, against a real SQLite epoch store and a committer that
records what it is given."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import trio

from logstrand.epochstore import AsyncEpochStore, LogAttributes, LogRange, SqliteEpochStore
from logstrand.storage._upkeep import Upkeep

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

LOGS = 2000


class _Committer:
    """Holds logs 1..LOGS; records each pass, and runs ``between`` after it."""

    def __init__(self, passes: int, between: Callable[[int], None]) -> None:
        self.passes: list[tuple[dict[int, int], dict[int, int], dict[int, int]]] = []
        self.wanted, self.between = passes, between
        self.scope = trio.CancelScope()

    def logs(self) -> list[int]:
        return list(range(1, LOGS + 1))

    def maintain(self, _: Any, trims: Any, retention: Any, space: Any, local: Any) -> None:
        self.passes.append((dict(trims), dict(retention or {}), dict(space or {})))
        self.between(len(self.passes))
        if len(self.passes) == self.wanted:
            self.scope.cancel()


def _view(store: SqliteEpochStore, ranges: list[LogRange]) -> Any:
    return types.SimpleNamespace(
        astore=AsyncEpochStore(store),
        ranges=ranges,
        storage_weights=lambda: {1: 1.0, 2: 1.0, 3: 1.0},
    )


async def _passes(store: SqliteEpochStore, ranges: list[LogRange], committer: _Committer) -> None:
    options = types.SimpleNamespace(maintenance_s=0.001)
    view = _view(store, ranges)
    upkeep = Upkeep(1, options, committer, None, view, "", apply=committer.maintain)  # type: ignore[arg-type]
    with committer.scope:
        await upkeep.maintain()


async def test_a_pass_reads_the_trim_points_of_the_logs_trimmed_since_the_last(
    tmp_path: Path,
) -> None:
    """The first pass reads every log's trim point (those missed while the
    node was down); the next ones only those the trim feed names: before, each
    pass read all of them, every 10 s, whatever the number of logs."""
    store = SqliteEpochStore(tmp_path / "e.db")
    store.set_trim_point(5, 40)

    def between(done: int) -> None:
        if done == 1:
            store.set_trim_point(7, 100)

    committer = _Committer(3, between)
    await _passes(store, [LogRange(1, LOGS)], committer)
    first, second, third = (trims for trims, _, _ in committer.passes)
    assert len(first) == LOGS
    assert first[5] == 40
    assert second == {7: 100}
    assert third == {}
    store.close()


async def test_retention_comes_from_the_ranges_that_set_one(tmp_path: Path) -> None:
    store = SqliteEpochStore(tmp_path / "e.db")
    ranges = [
        LogRange(1, 500, LogAttributes(retention_ms=60_000)),
        LogRange(501, 1000),
        # The log's whole bound on each node (LogsDB counts the log's bytes).
        LogRange(1001, 1500, LogAttributes(replication_factor=2, retention_bytes=3000)),
        LogRange(1501, 9000, LogAttributes(retention_ms=1000, retention_bytes=10)),
    ]
    committer = _Committer(1, lambda _: None)
    await _passes(store, ranges, committer)
    [(_, retention, space)] = committer.passes
    assert retention == {
        **dict.fromkeys(range(1, 501), 60_000),
        **dict.fromkeys(range(1501, LOGS + 1), 1000),
    }
    assert space == {
        **dict.fromkeys(range(1001, 1501), 3000),
        **dict.fromkeys(range(1501, LOGS + 1), 10),
    }
    store.close()

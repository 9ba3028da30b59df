"""An in-memory epoch store: the shared contract on a dict, for simulations and unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..epochstore import EpochStore, MemberSession, Watch

if TYPE_CHECKING:
    from collections.abc import Callable


class _Session(MemberSession):
    def __init__(self, store: MemoryEpochStore, node_id: int) -> None:
        self.store = store
        self.node_id = node_id

    def close(self) -> None:
        self.store.set_alive(self.store.alive_nodes() - {self.node_id})


class MemoryEpochStore(EpochStore):
    """Every document in a dict, with versions for compare-and-set.

    Membership is whatever ``set_alive`` last said (sessions add and remove
    themselves); watchers are called at once, in the caller's thread.
    """

    def __init__(self, cluster: str = "memory") -> None:
        self.url = f"memory://{cluster}"
        self.cluster = cluster
        self._docs: dict[str, tuple[bytes, int]] = {}
        self._alive: frozenset[int] = frozenset()
        self._watchers: list[Callable[[frozenset[int]], None]] = []

    def _get(self, path: str) -> tuple[bytes, int] | None:
        return self._docs.get(path)

    def _cas(self, path: str, value: bytes, version: int | None) -> bool:
        got = self._docs.get(path)
        if (got is None) != (version is None) or (got is not None and got[1] != version):
            return False
        self._docs[path] = (value, 0 if got is None else got[1] + 1)
        return True

    def register_member(self, node_id: int, *, wait_s: float = 30.0) -> MemberSession:
        self.set_alive(self._alive | {node_id})
        return _Session(self, node_id)

    def alive_nodes(self) -> frozenset[int]:
        return self._alive

    def set_alive(self, alive: frozenset[int]) -> None:
        if alive != self._alive:
            self._alive = alive
            for watcher in list(self._watchers):
                watcher(alive)

    def watch_members(self, callback: Callable[[frozenset[int]], None]) -> Watch:
        self._watchers.append(callback)
        callback(self._alive)
        return Watch(lambda: self._watchers.remove(callback))

    def close(self) -> None:
        self._watchers.clear()

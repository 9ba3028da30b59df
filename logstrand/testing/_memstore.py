"""An in-memory epoch store: the shared contract on a dict, for simulations and unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..epochstore import EpochStore, Member, Members, MemberSession, Watch

if TYPE_CHECKING:
    from collections.abc import Callable


class _Session(MemberSession):
    def __init__(self, store: MemoryEpochStore, node_id: int) -> None:
        self.store = store
        self.node_id = node_id

    def publish(self, *, sequencer: bool, why: str = "") -> None:
        self.store.said[self.node_id] = (sequencer, why)
        self.store.set_alive(self.store.alive_nodes(), force=True)

    def close(self) -> None:
        self.store.set_alive(self.store.alive_nodes() - {self.node_id})


class MemoryEpochStore(EpochStore):
    """Every document in a dict, with versions for compare-and-set.

    Membership is whatever ``set_alive`` last said (sessions add and remove
    themselves); watchers are called at once, in the caller's thread.  Every
    member's clock is the cluster's (offset 0).
    """

    def __init__(self, cluster: str = "memory") -> None:
        self.url = f"memory://{cluster}"
        self.cluster = cluster
        self._docs: dict[str, tuple[bytes, int]] = {}
        self._alive: frozenset[int] = frozenset()
        self._watchers: list[Callable[[Members], None]] = []
        #: What each member said of itself (``publish``): takes sequencers, why not.
        self.said: dict[int, tuple[bool, str]] = {}

    def _get(self, path: str) -> tuple[bytes, int] | None:
        return self._docs.get(path)

    def _cas(self, path: str, value: bytes, version: int | None) -> bool:
        got = self._docs.get(path)
        if (got is None) != (version is None) or (got is not None and got[1] != version):
            return False
        self._docs[path] = (value, 0 if got is None else got[1] + 1)
        return True

    def register_member(
        self, node_id: int, *, wait_s: float = 30.0, sequencer: bool = True, why: str = ""
    ) -> MemberSession:
        self.said[node_id] = (sequencer, why)
        self.set_alive(self._alive | {node_id})
        return _Session(self, node_id)

    def members(self) -> Members:
        said = self.said
        return {n: Member(n, 0, *said.get(n, (True, ""))) for n in sorted(self._alive)}

    def alive_nodes(self) -> frozenset[int]:
        return self._alive

    def set_alive(self, alive: frozenset[int], *, force: bool = False) -> None:
        if alive != self._alive or force:
            self._alive = alive
            members = self.members()
            for watcher in list(self._watchers):
                watcher(members)

    def watch_members(self, callback: Callable[[Members], None]) -> Watch:
        self._watchers.append(callback)
        callback(self.members())
        return Watch(lambda: self._watchers.remove(callback))

    def close(self) -> None:
        self._watchers.clear()

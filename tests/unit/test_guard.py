"""The node's door (``storage._guard``): a refusal that rests on a cached
fact is checked against the epoch store first, and while the store cannot
be reached the answer is AGAIN, never a refusal for good (a node whose
ZooKeeper session expired refused legitimate SEALs on stale facts)."""

from __future__ import annotations

from typing import Any

import trio

from logstrand.epochstore import LogAttributes, LogRange, NodeConfig
from logstrand.errors import EpochStoreUnavailableError, Status
from logstrand.security import TRUSTED
from logstrand.storage._guard import Guard
from logstrand.storage._metrics import NodeMetrics
from logstrand.wire import Seal

METRICS = NodeMetrics(1)


class Epochs:
    def __init__(self, next_epoch: int) -> None:
        self.next_epoch = next_epoch


class Store:
    """The epoch store as the guard reads it: the log's next epoch, or unreachable."""

    def __init__(self) -> None:
        self.next_epoch = 3
        self.up = True
        self.reads = 0

    def log_epochs(self, log_id: int) -> Epochs:
        self.reads += 1
        if not self.up:
            raise EpochStoreUnavailableError("session expired")
        return Epochs(self.next_epoch)

    async def grouped(self, fn: Any, *, read_only: bool = False) -> Any:
        """As ``AsyncEpochStore.grouped``: ``fn`` on the (here synchronous)
        store.  The guard only reads: its groups must not take the write lock."""
        assert read_only
        await trio.lowlevel.checkpoint()
        return fn(self)


class View:
    def __init__(self, store: Store) -> None:
        self.astore = store
        self.nodes = {n: NodeConfig(n, f"127.0.0.1:{4440 + n}") for n in (1, 2, 3)}
        self.ranges = [LogRange(1, 10, LogAttributes(replication_factor=2))]

    def log_attributes(self, log_id: int) -> Any:
        return self.ranges[0].attributes if 1 <= log_id <= 10 else None


async def test_a_refusal_on_a_stale_fact_is_again_while_the_store_is_away(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Store()
    guard = Guard(1, View(store), METRICS, secure=False)  # type: ignore[arg-type]
    seal = Seal(1, 1, 4)  # seals up to epoch 4: the cache says 3 is next
    # The store says epoch 4 was never handed out: refused, for good.
    refused = await guard.check(TRUSTED, seal)
    assert refused is not None
    assert refused[0] == Status.INVALID_PARAM
    # Another node took epoch 4 while this node's session expired: the store
    # cannot be reached, so the stale fact cannot be checked: AGAIN.
    store.next_epoch, store.up = 5, False
    await trio.sleep(1)
    refused = await guard.check(TRUSTED, seal)
    assert refused is not None
    assert refused[0] == Status.AGAIN
    assert "cannot be reached" in refused[1]
    # Asked again at once (the read is rate-limited): still AGAIN, not a refusal.
    refused = await guard.check(TRUSTED, seal)
    assert refused is not None
    assert refused[0] == Status.AGAIN
    # The session is back: the fact is read again and the SEAL is taken.
    store.up = True
    await trio.sleep(1)
    assert await guard.check(TRUSTED, seal) is None


def test_only_a_plain_store_from_a_node_passes_without_the_full_check() -> None:
    """``Guard.passes`` (the write path's one admission check) lets through
    only what ``check`` would pass at once: a user's STORE, a recovery's, one
    for a log the configuration lacks or for an epoch not known yet all go to
    ``check``, which refuses or reads the store."""
    from logstrand.batch import make_batch
    from logstrand.security import node_principal, user_principal
    from logstrand.types import compose_lsn
    from logstrand.wire import Store as StoreMsg

    guard = Guard(1, View(Store()), METRICS, secure=True)  # type: ignore[arg-type]
    guard._next_epoch[2] = 3

    def store(log: int, epoch: int, seal: int = 0) -> StoreMsg:
        batch = make_batch([compose_lsn(epoch, 1)], [b"x"], timestamps_ms=0)
        return StoreMsg.of(1, log, 1, (1, 2), 0, False, batch, recovery_seal=seal)

    assert guard.passes(node_principal(2), store(2, 2))
    assert guard.passes(TRUSTED, store(2, 1))
    assert not guard.passes(user_principal("eve"), store(2, 2))
    assert not guard.passes(node_principal(2), store(2, 2, seal=3))
    assert not guard.passes(node_principal(2), store(11, 1))  # not in the configuration
    assert not guard.passes(node_principal(2), store(2, 3))  # epoch 3 not handed out yet

"""``Tiering``: the node extension of tiered storage (``logstrand node
--tier-url``).  It answers ``TierRead`` (``_serve``) and runs the offload
rounds (``_offload``), and exports what they do as metrics."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..wire import TierRead
from ._objects import ObjectStore, TierTarget
from ._offload import Offload
from ._serve import TierServer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from ..net import Connection
    from ..rpc import ClusterView
    from ..security import Credentials

_log = logging.getLogger("logstrand.tier")


@attrs.frozen
class TierOptions:
    target: TierTarget
    #: Bytes of blocks a node keeps for readers (``--tier-cache``).
    cache_bytes: int = 256 * 1024 * 1024
    #: Seconds between offload rounds (``--tier-interval``; 0: none).
    interval_s: float = 30.0
    #: About how large an object grows (``--tier-object-size``).
    object_bytes: int = 64 * 1024 * 1024
    #: An object no segment names is deleted once this old (``--tier-orphan-age``).
    orphan_age_s: float = 3600.0


class TierHost(Protocol):
    """What the extension needs of its node."""

    url: str
    node_id: int
    credentials: Credentials | None

    @property
    def view(self) -> ClusterView: ...

    def clock_ms(self) -> int: ...

    def register(
        self, message_type: type, handler: Callable[[Connection, Any], Awaitable[None]]
    ) -> None: ...


class Tiering:
    """A node extension (``storage.NodeExtension``)."""

    def __init__(self, options: TierOptions) -> None:
        self.options = options
        self.server: TierServer | None = None
        self.offload: Offload | None = None

    async def run(
        self, host: TierHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        from ..client import open_client

        o = self.options
        store = ObjectStore(o.target)
        self.server = TierServer(store, host.view, o.cache_bytes)
        host.register(TierRead, self.server.handle)
        self.offload = offload = Offload(
            store, host.view, host.node_id, o.object_bytes, host.clock_ms, o.orphan_age_s
        )
        registry = getattr(getattr(host, "metrics", None), "registry", None)
        collector = _Collector(self)
        if registry is not None:
            registry.register(collector)
        try:
            async with trio.open_nursery() as nursery:
                self.server.nursery = nursery  # the read-ahead's
                task_status.started()
                if o.interval_s <= 0:
                    await trio.sleep_forever()
                async with open_client(host.url, credentials=host.credentials) as client:
                    while True:
                        await trio.sleep(o.interval_s)
                        await offload.round(client)
        finally:
            if registry is not None:
                registry.unregister(collector)


class _Collector:
    """The extension's figures, read when the node is scraped."""

    def __init__(self, tiering: Tiering) -> None:
        self.tiering = tiering

    def collect(self) -> Iterator[Any]:
        offload, server = self.tiering.offload, self.tiering.server
        if offload is not None:
            s = offload.stats
            for name, value, text in (
                ("objects", s.objects, "Objects this node uploaded and recorded."),
                ("bytes", s.bytes, "Bytes of the objects this node uploaded."),
                ("records", s.records, "Records in the objects this node uploaded."),
                ("failures", s.failures, "Offloads of a log that failed (retried)."),
                ("deleted", s.deleted, "Objects deleted after a trim."),
                ("orphans", s.orphans, "Objects deleted that no segment named."),
            ):
                yield CounterMetricFamily(f"logstrand_tier_offload_{name}", text, value=value)
        if server is not None:
            c = server.cache
            yield CounterMetricFamily(
                "logstrand_tier_cache_hits", "Blocks read from the cache.", value=c.hits
            )
            yield CounterMetricFamily(
                "logstrand_tier_cache_misses", "Blocks read from the store.", value=c.misses
            )
            yield GaugeMetricFamily(
                "logstrand_tier_cache_bytes", "Bytes the cache holds.", value=c.bytes
            )

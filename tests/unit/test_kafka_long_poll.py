"""A Kafka consumer waiting at the end of a partition costs the nodes
nothing while it waits: the front's long poll waits on a read stream that
follows the log, kept from one fetch to the next, instead of asking the
nodes for the log's tail every few milliseconds (which, with eight
partitions waiting, kept three nodes at 109% of a core between them)."""

from __future__ import annotations

from typing import Any, ClassVar

import trio

from logstrand.epochstore import LogRange, NamedLogs
from logstrand.kafka import _protocol as proto
from logstrand.kafka._data import DataPlane
from logstrand.types import compose_lsn


class _Store:
    async def run(self, fn: Any) -> Any:
        class S:
            def offset_bases(self, log_id: int) -> list[tuple[int, int]]:
                return []

            def last_clean_epoch(self, log_id: int) -> int:
                return 0

        return fn(S())


class _View:
    astore = _Store()

    async def refresh(self) -> None:
        pass

    def range_name(self, log_id: int) -> str | None:
        return None


class _Stream:
    """A stream that follows: it delivers nothing (no new record comes)."""

    opened = 0

    def __init__(self) -> None:
        _Stream.opened += 1

    async def batches(self) -> Any:
        await trio.sleep_forever()
        yield []

    async def aclose(self) -> None:
        pass


class _Client:
    """What the data plane asks of the client library, counted."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.view = _View()
        self.asked = 0
        self.groups = None  # consumer groups: not asked here

    async def tail_lsn(self, log_id: int) -> int:
        self.asked += 1
        return compose_lsn(1, 5)  # five records: the end is offset 5

    async def trim_point(self, log_id: int) -> int:
        self.asked += 1
        return 0

    def read(self, log_id: int, start: int, until: Any) -> _Stream:
        return _Stream()


def _topic() -> NamedLogs:
    return NamedLogs("t", (LogRange(7, 7, name="t"),))


def _fetch(offset: int, wait_ms: int) -> proto.Request:
    body = {
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }
    return proto.Request(1, 12, 1, "c", body)


async def test_a_consumer_waiting_at_the_end_asks_the_nodes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        client = _Client(nursery)
        data = DataPlane(client, lambda: {"t": _topic()})
        for _ in range(20):  # 20 long polls of 500 ms at the end
            answer = await data.fetch(_fetch(5, 500))
            row = answer["responses"][0]["partitions"][0]
            assert (row["error_code"], row["high_watermark"], row["records"]) == (0, 5, b"")
        # The tail and trim point were asked for once, at the first fetch;
        # one stream follows the log for all twenty.
        assert client.asked == 2
        assert _Stream.opened == 1
        nursery.cancel_scope.cancel()


async def test_asking_again_for_a_missing_topic_rereads_the_configuration_seldom(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Metadata for a topic that does not exist reads the configuration
    again (another front may just have made it), but at most every
    ``REREAD_S`` whoever asks: clients asking in a loop read the epoch store
    once per request."""
    from logstrand.kafka._front import KafkaFront
    from logstrand.kafka._rereads import REREAD_S

    class View(_View):
        ranges: ClassVar[list[Any]] = []
        cluster = "c"
        reads = 0

        async def refresh(self) -> None:
            View.reads += 1

    async with trio.open_nursery() as nursery:
        client = _Client(nursery)
        client.view = View()  # type: ignore[assignment]
        front = KafkaFront(
            client,  # type: ignore[arg-type]
            broker_id=0,
            advertise=("127.0.0.1", 9092),
            standalone=True,
        )
        ask = proto.Request(3, 12, 1, "c", {"topics": [{"name": "nope"}]})
        # Fifty clients ask at once, and again: each answer comes from a read
        # made after its question, and the reads are one per REREAD_S.
        t0 = trio.current_time()
        for _ in range(2):
            async with trio.open_nursery() as asking:
                for _ in range(50):
                    asking.start_soon(front._metadata, ask)
        assert View.reads == 3  # the first at once, then one per turn
        assert trio.current_time() - t0 >= 2 * REREAD_S
        answer = await front._metadata(ask)
        assert answer["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        nursery.cancel_scope.cancel()

"""CreateTopics and DeleteTopics: a topic is a named range of logs
(``_topics``), made of log ids that no epoch was ever taken in (so that it
starts empty), and deleted by trimming every log of it to its tail and
removing the range."""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..epochstore import LogAttributes
from ..epochstore._model import check_range_name
from ..errors import ExistsError, InvalidArgumentError, LogstrandError, NotFoundError
from ..kafka_errors import KafkaError
from ._topics import ConfigError, apply_configs, free_firsts, topic_id

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import EpochStore, LogRange, NamedLogs
    from ..rpc import ClusterView
    from ._protocol import Request

#: Partitions of a topic made without a number, unless the node says
#: (``--kafka-num-partitions``, Kafka's num.partitions; its default is 1 too).
AUTO_PARTITIONS = 1
#: Partitions one CreateTopics may ask for.
PARTITIONS_MAX = 10_000
#: Attempts to grow a topic while other fronts take the ids it looked at.
GROW_TRIES = 5
#: Log ids topics are allocated below.
TOPIC_IDS_TOP = 1 << 40


class TopicsPort(Protocol):
    """What the topic APIs need of the front (``KafkaFront``)."""

    client: AsyncClient
    view: ClusterView
    num_partitions: int

    def topics(self) -> dict[str, NamedLogs]: ...


class TopicApis:
    """CreateTopics and DeleteTopics (see the module docstring)."""

    def __init__(self, front: TopicsPort) -> None:
        self.front = front
        self._creating = trio.Lock()

    def replication(self) -> int:
        """What a topic gets when it asks for none: the default, as far as
        there are storage nodes."""
        storage = [n for n in self.front.view.nodes.values() if "storage" in n.roles]
        return max(1, min(LogAttributes().replication_factor, len(storage)))

    async def create_topic(self, name: str, partitions: int, attributes: LogAttributes) -> LogRange:
        """A new range named ``name`` of ``partitions`` logs never used before.

        Raises ExistsError when the name is taken."""
        astore = self.front.view.astore
        async with self._creating:
            while True:
                ranges = await astore.log_ranges()
                if any(r.name == name for r in ranges):
                    raise ExistsError(f"topic {name!r} already exists")
                first = await self.virgin_first(ranges, partitions)
                make = functools.partial(
                    _create, first=first, last=first + partitions - 1, a=attributes, name=name
                )
                try:
                    made = await astore.run(make)
                except ExistsError:
                    continue  # another front took it meanwhile: look again
                await self.front.view.refresh()
                return made

    async def virgin_first(self, ranges: list[LogRange], count: int, above: int = 0) -> int:
        """The lowest free run of ``count`` log ids above ``above`` that no
        epoch was ever taken in (a range removed keeps its logs' epochs, and
        a topic's logs must start empty)."""
        astore = self.front.view.astore
        for first in free_firsts(ranges, count, TOPIC_IDS_TOP, above=above):
            ids = list(range(first, first + count))
            epochs = await astore.log_epochs_many(ids)
            if all(epochs[i].next_epoch == 1 for i in ids):
                return first
        raise InvalidArgumentError("no free run of log ids for the topic")

    async def grow_topic(self, topic: NamedLogs, add: int) -> None:
        """``add`` partitions more: the ids right after its last range when
        they are free and were never used (the topic stays one range), else
        a new range of its own above its others (``epochstore._named``)."""
        astore = self.front.view.astore
        name, last = topic.name, topic.parts[-1]
        async with self._creating:
            for _ in range(GROW_TRIES):
                ranges = await astore.log_ranges()
                if not any(r.name == name and r.last == last.last for r in ranges):
                    raise NotFoundError(f"topic {name!r} changed meanwhile: ask again")
                after = list(range(last.last + 1, last.last + add + 1))
                next_first = min((r.first for r in ranges if r.first > last.last), default=None)
                epochs = await astore.log_epochs_many(after)
                in_place = (next_first is None or next_first > after[-1]) and all(
                    epochs[i].next_epoch == 1 for i in after
                )
                if in_place:
                    grow = functools.partial(_extend, first=last.first, last=last.last, add=add)
                else:
                    first = await self.virgin_first(ranges, add, above=last.last)
                    grow = functools.partial(_part, name=name, first=first, last=first + add - 1)
                try:
                    await astore.run(grow)
                except ExistsError:
                    continue  # another front took the ids meanwhile: look again
                await self.front.view.refresh()
                return
        raise ExistsError(
            f"topic {name!r}: the ids it could grow into were taken {GROW_TRIES} times"
        )

    async def create_topics(self, request: Request) -> dict[str, Any]:
        body = request.body
        out = []
        for t in body["topics"]:
            out.append(await self._create_one(t, bool(body["validate_only"])))
        return {"throttle_time_ms": 0, "topics": out}

    async def _create_one(self, t: dict[str, Any], validate_only: bool) -> dict[str, Any]:
        name = t["name"]

        def error(code: KafkaError, message: str) -> dict[str, Any]:
            return {"name": name, "error_code": code, "error_message": message}

        partitions = self.front.num_partitions if t["num_partitions"] == -1 else t["num_partitions"]
        r = self.replication() if t["replication_factor"] == -1 else t["replication_factor"]
        try:
            check_range_name(name)
        except InvalidArgumentError as exc:
            return error(KafkaError.INVALID_TOPIC_EXCEPTION, str(exc))
        if t["assignments"]:
            return error(
                KafkaError.INVALID_REPLICA_ASSIGNMENT,
                "logstrand places every record itself: no replica assignment",
            )
        if not 1 <= partitions <= PARTITIONS_MAX:
            return error(KafkaError.INVALID_PARTITIONS, f"partitions: 1 to {PARTITIONS_MAX}")
        try:
            attributes = apply_configs(
                LogAttributes(replication_factor=r) if 1 <= r <= 15 else LogAttributes(),
                [(c["name"], c["value"]) for c in t["configs"]],
            )
        except ConfigError as exc:
            return error(KafkaError.INVALID_CONFIG, str(exc))
        if not 1 <= r <= 15 or r > len(self.front.view.storage_weights()):
            return error(
                KafkaError.INVALID_REPLICATION_FACTOR,
                f"replication factor {r}: 1 to the number of storage nodes",
            )
        if validate_only:
            if name in self.front.topics():
                return error(KafkaError.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            made = None
        else:
            try:
                made = await self.create_topic(name, partitions, attributes)
            except ExistsError as exc:
                return error(KafkaError.TOPIC_ALREADY_EXISTS, str(exc))
            except LogstrandError as exc:
                return error(KafkaError.INVALID_REQUEST, str(exc))
        return {
            "name": name,
            "topic_id": topic_id(self.front.view.cluster, made) if made else bytes(16),
            "error_code": 0,
            "num_partitions": partitions,
            "replication_factor": r,
        }

    async def delete_topics(self, request: Request) -> dict[str, Any]:
        body = request.body
        if request.version >= 6:
            asked = [(t["name"], t["topic_id"]) for t in body["topics"]]
        else:
            asked = [(n, bytes(16)) for n in body["topic_names"]]
        await self.front.view.refresh()
        named = self.front.topics()
        by_id = {topic_id(self.front.view.cluster, r): r for r in named.values()}
        out = []
        for name, tid in asked:
            r = named.get(name) if name is not None else by_id.get(tid)
            row: dict[str, Any] = {"name": name, "topic_id": tid, "error_code": 0}
            if r is None:
                row["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    await self.delete_topic(r)
                except LogstrandError as exc:
                    row["error_code"] = KafkaError.UNKNOWN_SERVER_ERROR
                    row["error_message"] = str(exc)
            out.append(row)
        return {"throttle_time_ms": 0, "responses": out}

    async def delete_topic(self, r: NamedLogs) -> None:
        """Trim every log of the topic to its tail, then remove its ranges."""
        tails = await self.front.client.tail_lsns(r.logs())
        for log_id, tail in tails.items():
            if tail > 0:
                await self.front.client.trim(log_id, tail)
        with contextlib.suppress(NotFoundError):  # another front removed it meanwhile
            await self.front.view.astore.run(lambda s: s.remove_logs_named(r.name))
        await self.front.view.refresh()


def _extend(store: EpochStore, *, first: int, last: int, add: int) -> LogRange:
    return store.extend_logs(first, last, last + add)


def _part(store: EpochStore, *, name: str, first: int, last: int) -> LogRange:
    return store.add_logs_part(name, first, last)


def _create(store: EpochStore, *, first: int, last: int, a: LogAttributes, name: str) -> LogRange:
    return store.create_logs(first, last, a, name=name)

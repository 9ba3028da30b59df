"""The front's admin APIs beyond topics: configs, partitions, records, the cluster.

- DescribeConfigs: a topic's configs as ``_topics.TOPIC_CONFIGS`` names
  them (source: the topic's own when it differs from the default); a broker
  has none to show.
- AlterConfigs replaces a topic's configs (those not given go back to their
  defaults, as in Kafka); IncrementalAlterConfigs sets or deletes single
  ones.  Either is one change of the range's attributes.
- CreatePartitions grows a topic's range into the ids right after it, when
  they are in no range and no epoch was ever taken in them; otherwise it
  says so (logstrand's logs of a topic are one run of ids).
- DeleteRecords trims each partition's log below an offset.
- DescribeCluster: the brokers and the cluster id, as Metadata has them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..errors import LogstrandError
from ..kafka_errors import KafkaError
from ._topic_admin import PARTITIONS_MAX, TopicApis
from ._topics import (
    BOOLEAN,
    INT,
    LIST,
    TOPIC_CONFIG_INFO,
    TOPIC_CONFIGS,
    ConfigError,
    apply_configs,
    describe_configs,
)

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..epochstore import NamedLogs
    from ..rpc import ClusterView
    from ._data import DataPlane
    from ._protocol import Request


_log = logging.getLogger("logstrand.kafka")

TOPIC = 2
BROKER = 4
#: DescribeConfigs' config sources.
SOURCE_TOPIC = 1
SOURCE_STATIC = 4
SOURCE_DEFAULT = 5


def _entry(
    name: str, value: str, source: int, kind: int, doc: str, *, read_only: bool
) -> dict[str, Any]:
    """One config of a DescribeConfigs answer."""
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "is_default": source == SOURCE_DEFAULT,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": kind,
        "documentation": doc,
    }


#: IncrementalAlterConfigs' operations.
SET, DELETE, APPEND = 0, 1, 2
#: DeleteRecords past the high watermark waits this often this long for it.
RELEASE_WAITS, RELEASE_WAIT_S = 20, 0.05


class FrontPort(Protocol):
    """What the admin APIs need of the front (``KafkaFront``)."""

    client: AsyncClient
    view: ClusterView
    data: DataPlane
    topic_apis: TopicApis

    broker_id: int
    advertise: tuple[str, int]
    num_partitions: int
    auto_create: bool
    secure: bool

    def topics(self) -> dict[str, NamedLogs]: ...

    def brokers(self) -> dict[int, tuple[str, int]]: ...


class AdminApis:
    def __init__(self, front: FrontPort) -> None:
        self.front = front

    async def _range(self, name: str) -> NamedLogs | None:
        await self.front.view.refresh()
        return self.front.topics().get(name)

    # -- configs ---------------------------------------------------------------------

    async def describe_configs(self, request: Request) -> dict[str, Any]:
        results = []
        for res in request.body["resources"]:
            row: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "resource_type": res["resource_type"],
                "resource_name": res["resource_name"],
                "configs": [],
            }
            results.append(row)
            keys = res["configuration_keys"]
            synonyms = bool(request.body.get("include_synonyms"))
            if res["resource_type"] == BROKER:
                self._broker_configs(row, keys, synonyms)
                continue
            r = await self._range(res["resource_name"]) if res["resource_type"] == TOPIC else None
            if r is None:
                row["error_code"] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
                row["error_message"] = f"no topic {res['resource_name']!r}"
                continue
            for name, value, default, default_value in describe_configs(r.attributes):
                if keys is not None and name not in keys:
                    continue
                kind, broker_name, doc = TOPIC_CONFIG_INFO[name]
                source = SOURCE_DEFAULT if default else SOURCE_TOPIC
                entry = _entry(name, value, source, kind, doc, read_only=False)
                # As Kafka lists them: the topic's own setting, then the
                # default it falls back to (under the broker's name for it).
                if synonyms:
                    fallback = {"name": broker_name, "value": default_value}
                    own = [] if default else [{"name": name, "value": value, "source": source}]
                    entry["synonyms"] = [*own, {**fallback, "source": SOURCE_DEFAULT}]
                row["configs"].append(entry)
        return {"throttle_time_ms": 0, "results": results}

    def _broker_configs(self, row: dict[str, Any], keys: list[str] | None, synonyms: bool) -> None:
        """A broker's settings (read only: a node's are its command line's)."""
        # As Kafka: a broker describes itself (an admin client sends a BROKER
        # resource to that broker), and "" is the cluster-wide dynamic
        # defaults, of which logstrand has none.  Another broker's settings
        # are not this front's to give.
        name, own = row["resource_name"], str(self.front.broker_id)
        if name == "":
            return
        if name != own:
            row["error_code"] = KafkaError.INVALID_REQUEST
            row["error_message"] = (
                f"unexpected broker id, expected {own} or empty string, but received {name!r}"
            )
            return
        host, port = self.front.advertise
        scheme = "SASL_SSL" if self.front.secure else "PLAINTEXT"
        settings = {
            "broker.id": (own, INT, "This node's id."),
            "advertised.listeners": (f"{scheme}://{host}:{port}", LIST, "Where clients connect."),
            "num.partitions": (
                str(self.front.num_partitions),
                INT,
                "Partitions of a topic made without a number (--kafka-num-partitions).",
            ),
            "auto.create.topics.enable": (
                str(self.front.auto_create).lower(),
                BOOLEAN,
                "Whether naming a topic makes it (--kafka-auto-create).",
            ),
        }
        for key, (value, kind, doc) in settings.items():
            if keys is None or key in keys:
                entry = _entry(key, value, SOURCE_STATIC, kind, doc, read_only=True)
                if synonyms:
                    entry["synonyms"] = [{"name": key, "value": value, "source": SOURCE_STATIC}]
                row["configs"].append(entry)

    async def alter_configs(self, request: Request) -> dict[str, Any]:
        out = []
        for res in request.body["resources"]:
            given = [(c["name"], c["value"]) for c in res["configs"]]
            # Kafka's AlterConfigs sets the whole set: the rest back to defaults.
            named = {n for n, _ in given}
            changes = given + [(n, None) for n in TOPIC_CONFIGS if n not in named]
            out.append(await self._alter(res, changes, request.body["validate_only"]))
        return {"throttle_time_ms": 0, "responses": out}

    async def incremental_alter_configs(self, request: Request) -> dict[str, Any]:
        out = []
        for res in request.body["resources"]:
            changes: list[tuple[str, str | None]] = []
            bad = None
            for c in res["configs"]:
                if c["config_operation"] == SET:
                    changes.append((c["name"], c["value"]))
                elif c["config_operation"] == DELETE:
                    changes.append((c["name"], None))
                else:
                    listed = await self._list_change(res, c, changes)
                    if isinstance(listed, str):
                        bad = listed
                    else:
                        changes.append(listed)
            if bad is not None:
                out.append(_answer(res, KafkaError.INVALID_CONFIG, bad))
                continue
            out.append(await self._alter(res, changes, request.body["validate_only"]))
        return {"throttle_time_ms": 0, "responses": out}

    async def _list_change(
        self, res: dict[str, Any], c: dict[str, Any], before: list[tuple[str, str | None]]
    ) -> tuple[str, str] | str:
        """APPEND or SUBTRACT on a list config (cleanup.policy): its new value,
        from the topic's value (or the request's change before it), or why not."""
        name = c["name"]
        if TOPIC_CONFIG_INFO.get(name, (0,))[0] != LIST or res["resource_type"] != TOPIC:
            return f"{name}: APPEND and SUBTRACT are for list configs (cleanup.policy)"
        r = await self._range(res["resource_name"])
        if r is None:
            return "no such topic"
        now = {n: v for n, v, _, _ in describe_configs(r.attributes)}[name]
        for n, v in before:
            if n == name and v is not None:
                now = v
        items = [x for x in now.split(",") if x]
        given = [x.strip() for x in (c["value"] or "").split(",") if x.strip()]
        if c["config_operation"] == APPEND:
            items += [x for x in given if x not in items]
        else:
            items = [x for x in items if x not in given]
        if not items:
            return f"{name}: logstrand keeps no empty policy (delete, compact or both)"
        return name, ",".join(items)

    async def _alter(
        self, res: dict[str, Any], changes: list[tuple[str, str | None]], validate_only: bool
    ) -> dict[str, Any]:
        if res["resource_type"] != TOPIC:
            return _answer(res, KafkaError.INVALID_REQUEST, "only topic configs can be changed")
        r = await self._range(res["resource_name"])
        if r is None:
            return _answer(res, KafkaError.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")
        try:
            new = apply_configs(r.attributes, changes)
        except ConfigError as exc:
            return _answer(res, KafkaError.INVALID_CONFIG, str(exc))
        if not validate_only:
            fields = new.to_json()
            try:
                await self.front.view.astore.run(lambda s: s.update_logs_named(r.name, **fields))
            except LogstrandError as exc:
                return _answer(res, KafkaError.INVALID_CONFIG, str(exc))
            await self.front.view.refresh()
        return _answer(res, KafkaError.NONE, None)

    # -- partitions and records ----------------------------------------------------------

    async def create_partitions(self, request: Request) -> dict[str, Any]:
        out = []
        for t in request.body["topics"]:
            out.append(await self._grow(t, request.body["validate_only"]))
        return {"throttle_time_ms": 0, "results": out}

    async def _grow(self, t: dict[str, Any], validate_only: bool) -> dict[str, Any]:
        name, count = t["name"], t["count"]

        def error(code: KafkaError, message: str) -> dict[str, Any]:
            return {"name": name, "error_code": code, "error_message": message}

        r = await self._range(name)
        if r is None:
            return error(KafkaError.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        if t["assignments"]:
            return error(KafkaError.INVALID_REPLICA_ASSIGNMENT, "logstrand places records itself")
        if count <= r.count:
            return error(KafkaError.INVALID_PARTITIONS, f"{name} has {r.count} partitions already")
        if count > PARTITIONS_MAX:
            return error(KafkaError.INVALID_PARTITIONS, f"partitions: at most {PARTITIONS_MAX}")
        if not validate_only:
            try:
                await self.front.topic_apis.grow_topic(r, count - r.count)
            except LogstrandError as exc:
                return error(KafkaError.INVALID_PARTITIONS, f"cannot grow {name}: {exc}")
        return {"name": name, "error_code": 0, "error_message": None}

    async def delete_records(self, request: Request) -> dict[str, Any]:
        out = []
        for t in request.body["topics"]:
            rows = []
            for p in t["partitions"]:
                rows.append(await self._trim(t["name"], p))
            out.append({"name": t["name"], "partitions": rows})
        return {"throttle_time_ms": 0, "topics": out}

    async def _trim(self, name: str, p: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"partition_index": p["partition_index"], "low_watermark": -1}
        data = self.front.data
        r, log_id = await data.partition(name, p["partition_index"])
        if r is None:
            return {**row, "error_code": KafkaError.UNKNOWN_TOPIC_OR_PARTITION}
        try:
            start, end, m = await data.bounds(log_id)
            offset = end if p["offset"] == -1 else p["offset"]
            # Records acknowledged a moment ago may not be released yet: the
            # high watermark is given a second to reach the offset.
            for _ in range(RELEASE_WAITS):
                if offset <= end:
                    break
                await trio.sleep(RELEASE_WAIT_S)
                start, end, m = await data.bounds(log_id)
            if not 0 <= offset <= end:
                _log.info(
                    "kafka: DeleteRecords %s[%d] to %d: the log holds offsets %d..%d",
                    name,
                    p["partition_index"],
                    offset,
                    start,
                    end,
                )
                return {**row, "error_code": KafkaError.OFFSET_OUT_OF_RANGE}
            if offset > start:
                await self.front.client.trim(log_id, m.lsn_at(offset) - 1)
            start, _, _ = await data.bounds(log_id)
        except LogstrandError as exc:
            _log.warning("kafka: DeleteRecords %s[%d]: %s", name, p["partition_index"], exc)
            return {**row, "error_code": KafkaError.UNKNOWN_SERVER_ERROR}
        return {**row, "low_watermark": start, "error_code": 0}

    # -- the cluster -------------------------------------------------------------------

    async def describe_cluster(self, request: Request) -> dict[str, Any]:
        brokers = self.front.brokers()
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "cluster_id": self.front.view.cluster,
            "controller_id": min(brokers),
            "brokers": [
                {"broker_id": b, "host": h, "port": p, "rack": None}
                for b, (h, p) in sorted(brokers.items())
            ],
        }


def _answer(res: dict[str, Any], code: KafkaError, message: str | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": res["resource_type"],
        "resource_name": res["resource_name"],
    }

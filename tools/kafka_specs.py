"""Generate ``logstrand/kafka/specs.json`` from Kafka's message schemas.

Kafka describes every request and response of its protocol in JSON files
(``clients/src/main/resources/common/message`` in apache/kafka): the fields,
their types, the versions each field exists in, which versions are
*flexible* (compact strings and arrays, tagged fields), which fields may be
null and which are tagged.  This script reads those files from a checkout
and writes the layout of the APIs the Kafka front speaks, and nothing else
(no descriptions), as compact JSON that ``logstrand.kafka._codec`` compiles
into encoders and decoders.

    python tools/kafka_specs.py PATH/TO/kafka > logstrand/kafka/specs.json

A field is ``[name, type, versions, nullable, tag, default, fields, flexible]``:
``name`` in snake case, ``type`` as Kafka spells it (``int32``, ``string``,
``[]int32``, ``[]Struct``, ``records`` ...), ``versions`` and ``nullable`` as
``[low, high]`` (``high`` 32767 for "and up"; ``nullable`` null when never),
``tag`` the tag number of a tagged field (else null), ``default`` the
schema's default as a string (else null), ``fields`` a struct's fields
(else null), ``flexible`` the field's own flexible versions when it has
them (``[]``: never; else null).  Common structs are inlined where used.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

#: API key -> the schema files' stem (without Request/Response): every API
#: a Kafka client may send to a broker, so that the front can answer even
#: the ones it does not serve with an error code instead of closing.
APIS = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    47: "OffsetDelete",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    55: "DescribeQuorum",
    57: "UpdateFeatures",
    60: "DescribeCluster",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    74: "ListClientMetricsResources",
    75: "DescribeTopicPartitions",
    76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe",
    78: "ShareFetch",
    79: "ShareAcknowledge",
}
OPEN = 32767
_PRIMITIVES = {
    "bool",
    "int8",
    "int16",
    "uint16",
    "int32",
    "int64",
    "float64",
    "string",
    "bytes",
    "records",
    "uuid",
}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _range(text: str | None) -> list[int] | None:
    """Kafka's version ranges: "none", "3+", "0-4", "2"."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return [int(text[:-1]), OPEN]
    if "-" in text:
        lo, hi = text.split("-")
        return [int(lo), int(hi)]
    return [int(text), int(text)]


def _load(path: Path) -> dict[str, Any]:
    text = "\n".join(re.sub(r"^\s*//.*$", "", line) for line in path.read_text().splitlines())
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _field(raw: dict[str, Any], common: dict[str, list[dict[str, Any]]]) -> list[Any]:
    kind: str = raw["type"]
    inner = kind[2:] if kind.startswith("[]") else kind
    children = raw.get("fields")
    if children is None and inner not in _PRIMITIVES:
        children = common[inner]
    versions = _range(raw.get("versions"))
    tagged = raw.get("tag")
    if tagged is not None:
        versions = _range(raw.get("taggedVersions", raw.get("versions")))
    return [
        _snake(raw["name"]),
        kind if inner in _PRIMITIVES else ("[]struct" if kind.startswith("[]") else "struct"),
        versions,
        _range(raw.get("nullableVersions")),
        tagged,
        None if raw.get("default") is None else str(raw["default"]),
        None if children is None else [_field(c, common) for c in children],
        _flex(raw),
    ]


def _flex(raw: dict[str, Any]) -> list[int] | None:
    """A field's own flexible versions (only the request header's client id
    has them: "none", a plain string even in flexible headers)."""
    text = raw.get("flexibleVersions")
    if text is None:
        return None
    return _range(text) or []


def spec(path: Path) -> dict[str, Any]:
    schema = _load(path)
    common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
    return {
        "name": schema["name"],
        "valid": _range(schema["validVersions"]),
        "flexible": _range(schema["flexibleVersions"]),
        "fields": [_field(f, common) for f in schema["fields"]],
    }


def main(root: Path) -> None:
    where = root / "clients/src/main/resources/common/message"
    out: dict[str, Any] = {
        "header": {
            "request": spec(where / "RequestHeader.json"),
            "response": spec(where / "ResponseHeader.json"),
        },
        "apis": {},
    }
    for key, stem in sorted(APIS.items()):
        out["apis"][str(key)] = {
            "request": spec(where / f"{stem}Request.json"),
            "response": spec(where / f"{stem}Response.json"),
        }
    json.dump(out, sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Kafka requests and responses as frames: headers, versions, the APIs served.

A Kafka frame is a 4-byte big-endian size and then the message.  A request
starts with a header (API key, version, correlation id, client id; v2 adds
tagged fields and is used with the API's flexible versions), a response
with the correlation id (v1 adds tagged fields), except that ApiVersions
answers with header v0 always, so a client that asked with a version the
broker does not know can still read the answer.
"""

from __future__ import annotations

import functools
import json
import struct
from importlib import resources
from typing import Any

import attrs

from ._codec import Decoder, Encoder, Items, KafkaDecodeError, compile_struct, unbounded

API_VERSIONS = 18
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
#: What a connection may ask before it authenticated, in secure mode: no
#: other request is even decoded (``_server``).
BEFORE_AUTH = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
_HEAD = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


#: API key -> the versions a front serves (ApiVersions lists them; SASL is
#: added in secure mode).
SERVED: dict[int, tuple[int, int]] = {
    0: (0, 11),
    1: (4, 12),
    2: (0, 7),
    API_VERSIONS: (0, 3),
    3: (0, 12),
    8: (0, 9),
    9: (0, 9),
    10: (0, 4),
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 5),
    16: (0, 5),
    19: (0, 7),
    20: (0, 6),
    21: (0, 2),
    22: (0, 4),
    23: (0, 4),
    29: (0, 3),
    30: (0, 3),
    31: (0, 3),
    32: (0, 4),
    33: (0, 2),
    37: (0, 3),
    42: (0, 2),
    44: (0, 1),
    47: (0, 0),
    60: (0, 1),
    68: (0, 1),
    69: (0, 0),
}


#: The transaction APIs, served with ``--kafka-transactions`` (a producer's
#: versions: AddPartitionsToTxn v4+ is brokers', and the versions of
#: KIP-890's second part, an epoch bumped by every EndTxn, are not served).
TXN_SERVED: dict[int, tuple[int, int]] = {24: (0, 3), 25: (0, 3), 26: (0, 4), 28: (0, 3)}


#: The SASL APIs, served in secure mode.  SaslHandshake from v0, as Kafka
#: lists it: older librdkafka (2.0.2, Debian 12's kcat) takes the handshake as
#: absent without v0 and fails every mechanism, and kafka-python 2.0 sends v0
#: and then the SASL messages raw (``kafka._auth``, ``_server``).
SASL_SERVED: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}


#: What logstrand does not have, by the APIs that would need it.
_MISSING = (
    ((22, 24, 25, 26, 28, 65, 66), "transactions are not served (idempotent producers are)"),
    ((76, 77, 78, 79), "share groups are not served"),
    ((48, 49), "client quotas are not served (a node bounds each client by itself)"),
    ((38, 39, 40, 41), "delegation tokens are not served (users have tokens: logstrand users add)"),
    ((50, 51), "SCRAM credentials are made by 'logstrand users add', not through Kafka"),
    (
        (34, 35, 43, 45, 46),
        "logstrand places every record itself: no replicas, leaders or log dirs",
    ),
    ((55, 57), "KRaft's quorum and features are not logstrand's"),
    ((61,), "producer state is not described through Kafka"),
    ((71, 72, 74), "client telemetry is not collected"),
    # Not listed in ApiVersions, a Kafka 3.7+ admin client describes topics
    # with Metadata instead (KIP-966); one that asks anyway learns why.
    ((75,), "DescribeTopicPartitions is not served: Metadata describes topics"),
)


def missing(api_key: int, served: tuple[int, int] | None) -> tuple[int, str]:
    """The error code and the words for an API (or a version of it) that a
    front does not serve."""
    if served is not None:
        lo, hi = served
        return 35, f"versions {lo}-{hi} of it are served"  # UNSUPPORTED_VERSION
    for keys, why in _MISSING:
        if api_key in keys:
            code = 61 if api_key in (38, 39, 40, 41) else 35  # DELEGATION_TOKEN_AUTH_DISABLED
            return code, why
    return 35, "not served by logstrand's Kafka front (docs/kafka.md)"


@functools.cache
def _specs() -> dict[str, Any]:
    text = resources.files("logstrand.kafka").joinpath("specs.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def api_name(api_key: int) -> str:
    spec = _specs()["apis"].get(str(api_key))
    return "unknown" if spec is None else spec["request"]["name"].removesuffix("Request")


def known_versions(api_key: int) -> tuple[int, int] | None:
    """The versions Kafka's schemas define for an API (None: not one we know)."""
    spec = _specs()["apis"].get(str(api_key))
    if spec is None:
        return None
    lo, hi = spec["request"]["valid"]
    return lo, hi


def _flexible(spec: dict[str, Any], version: int) -> bool:
    rng = spec["flexible"]
    return rng is not None and rng[0] <= version <= rng[1]


@functools.cache
def _body(api_key: int, kind: str, version: int) -> tuple[Decoder, Encoder]:
    spec = _specs()["apis"][str(api_key)][kind]
    return compile_struct(spec["fields"], version, _flexible(spec, version))


@functools.cache
def _header(kind: str, version: int) -> tuple[Decoder, Encoder]:
    spec = _specs()["header"][kind]
    return compile_struct(spec["fields"], version, _flexible(spec, version))


def request_header_version(api_key: int, version: int) -> int:
    spec = _specs()["apis"][str(api_key)]["request"]
    return 2 if _flexible(spec, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == API_VERSIONS:
        return 0
    spec = _specs()["apis"][str(api_key)]["response"]
    return 1 if _flexible(spec, version) else 0


@attrs.frozen
class Request:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any]
    #: The connection it came on (``_server``): its peer, its SASL state.
    conn: Any = None


class UnsupportedRequest(Exception):
    """A well-formed header naming an API or version this front does not serve."""

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(f"{api_name(api_key)} (key {api_key}) v{version} is not served")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """API key, version and correlation id: the first 8 bytes of every request."""
    if len(frame) < _HEAD.size:
        raise KafkaDecodeError("request shorter than its header")
    key, version, correlation = _HEAD.unpack_from(frame)
    return key, version, correlation


def decode_request(
    frame: bytes,
    served: dict[int, tuple[int, int]],
    conn: Any = None,
    *,
    items: Items | None = None,
) -> Request:
    """One request (the frame without its size), from connection ``conn``.

    ``items``: the array items decoding may make (``_codec``; None: no bound,
    for what this process made itself).

    Raises:
        UnsupportedRequest: an API or version not in ``served`` (the body is
            not decoded).
        KafkaDecodeError: bytes that are not the request; ``TooManyItems``
            past ``items``.
    """
    api_key, version, correlation = peek_header(frame)
    span = served.get(api_key)
    if span is None or not span[0] <= version <= span[1]:
        raise UnsupportedRequest(api_key, version, correlation)
    allowance = unbounded() if items is None else items
    head_dec, _ = _header("request", request_header_version(api_key, version))
    header, pos = head_dec(frame, 0, allowance)
    body_dec, _ = _body(api_key, "request", version)
    body, _ = body_dec(frame, pos, allowance)
    # Bytes after the request are ignored, as Kafka's brokers ignore them:
    # librdkafka 2.x leaves three after a Metadata v12 request for every topic.
    return Request(api_key, version, correlation, header["client_id"], body, conn)


def encode_response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """One response, with its size first."""
    out = bytearray(4)
    _, head_enc = _header("response", response_header_version(api_key, version))
    head_enc({"correlation_id": correlation_id}, out)
    _, body_enc = _body(api_key, "response", version)
    body_enc(body, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# -- the other side, for tests and the codec bench ---------------------------------------


def encode_request(
    api_key: int, version: int, correlation_id: int, body: dict[str, Any], client_id: str = "t"
) -> bytes:
    out = bytearray(4)
    _, head_enc = _header("request", request_header_version(api_key, version))
    head_enc(
        {
            "request_api_key": api_key,
            "request_api_version": version,
            "correlation_id": correlation_id,
            "client_id": client_id,
        },
        out,
    )
    _, body_enc = _body(api_key, "request", version)
    body_enc(body, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, dict[str, Any]]:
    """Correlation id and body of a response (the frame without its size)."""
    head_dec, _ = _header("response", response_header_version(api_key, version))
    header, pos = head_dec(frame, 0, unbounded())
    body_dec, _ = _body(api_key, "response", version)
    body, pos = body_dec(frame, pos, unbounded())
    if pos != len(frame):
        raise KafkaDecodeError(f"{len(frame) - pos} bytes left after the response")
    return header["correlation_id"], body

"""Coverage-guided fuzzing of the Kafka front's decoder (atheris).

    .venv/bin/python tests/fuzz/fuzz_kafka.py -max_total_time=60

The first two bytes of an input choose one of the (API, version) pairs a
front serves (the SASL ones of secure mode too); the rest is the request's
body after a valid header.  Whatever the bytes:

- decoding raises nothing but ``KafkaDecodeError``;
- it makes at most one array item per byte of the frame, and no more than
  it was allowed (``Items``: the listener's budget);
- what decodes encodes again, and that decodes to the same request;
- a Produce request's records decode (``_records``, ``_inflate``) within
  the room they are given, or raise ``KafkaDecodeError``.

Seeds: a valid request of each pair, written to the corpus directory given
on the command line when it is empty.
"""

from __future__ import annotations

from typing import Any

import atheris

with atheris.instrument_imports(include=["logstrand"]):
    from logstrand.kafka import _protocol as proto
    from logstrand.kafka._codec import Items, KafkaDecodeError, TooManyItems
    from logstrand.kafka._front import SERVED
    from logstrand.kafka._protocol import SASL_SERVED, TXN_SERVED
    from logstrand.kafka._records import decode_batches

SERVED_ALL = {**SERVED, **SASL_SERVED, **TXN_SERVED}
PAIRS = sorted((k, v) for k, (lo, hi) in SERVED_ALL.items() for v in range(lo, hi + 1))
#: The items one decode may make here (the listener's allowance is larger).
ITEMS_ALLOWED = 5_000
RECORDS_ROOM = 1 << 20


def _header(api_key: int, version: int) -> bytes:
    frame = proto.encode_request(api_key, version, 7, {}, client_id="fuzz")
    head, _ = proto._header("request", proto.request_header_version(api_key, version))
    _, end = head(frame[4:], 0, Items(100))
    return frame[4 : 4 + end]


HEADERS = {pair: _header(*pair) for pair in PAIRS}


def _records(body: dict[str, Any]) -> None:
    for t in body.get("topic_data") or ():
        for p in t.get("partition_data") or ():
            try:
                batches = decode_batches(p["records"] or b"", RECORDS_ROOM)
            except KafkaDecodeError:
                continue
            assert sum(b.cost for b in batches) <= RECORDS_ROOM


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    api_key, version = PAIRS[int.from_bytes(data[:2], "big") % len(PAIRS)]
    frame = HEADERS[(api_key, version)] + data[2:]
    items = Items(ITEMS_ALLOWED)
    try:
        request = proto.decode_request(frame, SERVED_ALL, items=items)
    except TooManyItems:
        assert items.used <= ITEMS_ALLOWED
        return
    except KafkaDecodeError:
        return
    assert items.used <= len(frame)
    again = proto.encode_request(api_key, version, 7, request.body, client_id="fuzz")
    back = proto.decode_request(again[4:], SERVED_ALL)
    assert back.body == request.body, (api_key, version)
    if api_key == 0:
        _records(request.body)


def seeds() -> list[bytes]:
    """A valid request of every pair: defaults, and arrays of one default item."""
    spec = proto._specs()["apis"]
    out = []
    for api_key, version in PAIRS:
        body: dict[str, Any] = {}
        for f in spec[str(api_key)]["request"]["fields"]:
            if f[1].startswith("[]") and f[2][0] <= version <= f[2][1] and f[4] is None:
                body[f[0]] = [{}] if f[1] == "[]struct" or f[6] else []
        frame = proto.encode_request(api_key, version, 7, body, client_id="fuzz")
        index = PAIRS.index((api_key, version)).to_bytes(2, "big")
        head = len(HEADERS[(api_key, version)])
        out.append(index + frame[4 + head :])
    return out


if __name__ == "__main__":
    from seeded import run

    run(one_input, seeds())

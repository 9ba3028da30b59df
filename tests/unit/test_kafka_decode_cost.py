"""What decoding a Kafka request costs, for every API and version a front
serves: time and memory linear in the frame, and memory within what the
front budgets for it (``_codec.ITEM_BYTES`` an array item).

The frames are the costliest a peer can build: every top-level array filled
with items of nothing but defaults (each a few bytes on the wire, a dict of
every field once decoded), and, in flexible versions, the tagged section
filled with unknown tags.  A frame of repeated tags, which was quadratic,
is refused at its second tag."""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

import pytest

from logstrand.kafka import _protocol as proto
from logstrand.kafka._codec import ITEM_BYTES, Items, KafkaDecodeError, write_uvarint
from logstrand.kafka._front import SERVED

#: Items per array in the small frames; the large are ``SCALE`` times that.
ITEMS = 250
SCALE = 8
ALL_SERVED = {**SERVED, 17: (1, 1), 36: (0, 2)}  # and the SASL APIs of secure mode


def _versions(api_key: int, lo: int, hi: int) -> set[int]:
    """The versions whose layouts differ most: the first and last served,
    and the first flexible one (compact lengths, tagged sections)."""
    flexible = proto._specs()["apis"][str(api_key)]["request"]["flexible"]
    first_flexible = flexible[0] if flexible and lo <= flexible[0] <= hi else lo
    return {lo, hi, first_flexible}


#: Every served API at the versions that differ most.
CASES = sorted((key, v) for key, (lo, hi) in ALL_SERVED.items() for v in _versions(key, lo, hi))


def _arrays(api_key: int, version: int) -> list[list[Any]]:
    spec = proto._specs()["apis"][str(api_key)]["request"]
    return [
        f
        for f in spec["fields"]
        if f[1].startswith("[]") and f[2][0] <= version <= f[2][1] and f[4] is None
    ]


def _frame(api_key: int, version: int, n: int) -> bytes:
    """A request whose arrays hold ``n`` default items each, and, in a
    flexible version, ``n`` unknown tagged fields at its end."""
    body: dict[str, Any] = {}
    for f in _arrays(api_key, version):
        body[f[0]] = [{} if f[1] == "[]struct" or f[6] else _zero(f[1][2:])] * n
    frame = bytearray(proto.encode_request(api_key, version, 1, body))
    spec = proto._specs()["apis"][str(api_key)]["request"]
    flexible = spec["flexible"] is not None and spec["flexible"][0] <= version
    if flexible and frame[-1] == 0:  # the body's empty tagged section
        del frame[-1]
        write_uvarint(n, frame)
        for tag in range(1000, 1000 + n):  # tags no schema has, each once
            write_uvarint(tag, frame)
            frame += b"\x00"
    return bytes(frame[4:])


def _zero(kind: str) -> Any:
    return "" if kind == "string" else (b"" if kind in ("bytes", "records") else 0)


def _decode(frame: bytes) -> Items:
    items = Items(1 << 30)
    proto.decode_request(frame, ALL_SERVED, items=items)
    return items


def _peak(frame: bytes) -> tuple[int, Items]:
    gc.collect()
    tracemalloc.start()
    try:
        items = _decode(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, items


def _seconds(frame: bytes) -> float:
    """The best of five decodes in this thread's CPU time, the collector off
    (its passes over the objects made are not the decoder's cost).  CPU
    time, not the wall clock: in a full make test the other workers' load
    made the large frame's best of three wall-clock decodes 41x the small
    one's."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(5):
            t0 = time.thread_time()
            _decode(frame)
            best = min(best, time.thread_time() - t0)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_decoding_costs_memory_within_its_budget_and_time_linear(
    api_key: int, version: int
) -> None:
    small, large = _frame(api_key, version, ITEMS), _frame(api_key, version, ITEMS * SCALE)
    peak, items = _peak(large)
    assert items.used <= len(large)  # every item took a byte of the frame at least
    # What the front reserves (ITEM_BYTES an item) covers what decoding made;
    # the frame itself is the caller's, counted in the byte budget.
    assert peak <= ITEM_BYTES * (items.used + 16), (peak, items.used)
    # Linear: eight times the frame, about eight times the time.  The bound
    # is half of what a quadratic decoder takes (64x), so that a busy
    # machine's noise does not fail it.
    t_small, t_large = _seconds(small), _seconds(large)
    assert t_large <= 32 * max(t_small, 1e-4), (t_small, t_large)


def test_a_frame_of_repeated_tags_is_refused_at_the_second() -> None:
    body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20}
    frame = bytearray(proto.encode_request(1, 12, 7, body))
    del frame[-1]
    n = 300_000
    write_uvarint(n, frame)
    frame += b"\x00\x01\x00" * n
    t0 = time.process_time()
    with pytest.raises(KafkaDecodeError, match="repeated or out of order"):
        _decode(bytes(frame[4:]))
    assert time.process_time() - t0 < 0.1

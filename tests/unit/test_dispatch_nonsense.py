"""Any sequence of well-formed but nonsensical messages leaves a node's
dispatch alive and every acknowledged record of a finished epoch intact
(hypothesis; ``tests/fuzz`` drives the same harness from raw bytes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logstrand.batch import make_batch
from logstrand.wire import (
    CleanPoint,
    FindTime,
    GetDigest,
    GetLogDirectory,
    LogInfo,
    Release,
    Seal,
    Store,
    Trim,
    decode_body,
    encode_body,
)
from tests.fuzz.harness import Harness

u32 = st.integers(0, 2**32 - 1)
small = st.integers(0, 6)
logs = st.sampled_from([0, 1, 2, 3, 9, 2**63 - 1, 2**64 - 1])
lsns = st.builds(lambda e, n: (e << 32) | n, st.one_of(small, u32), st.one_of(small, u32))


@st.composite
def stores(draw: st.DrawFn) -> Store:
    first = draw(lsns)
    n = draw(st.integers(1, 3))
    batch_lsns = [first + i for i in range(n) if (first + i) >> 32 == first >> 32]
    batch = make_batch(batch_lsns, [b"forged"] * len(batch_lsns), timestamps_ms=draw(u32))
    return Store.of(
        draw(u32),
        draw(logs),
        draw(st.integers(0, 5)),
        tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))),
        draw(lsns),
        draw(st.booleans()),
        batch,
        draw(st.one_of(st.just(0), small, u32)),
    )


messages = st.one_of(
    stores(),
    st.builds(Release, logs, lsns),
    st.builds(Seal, u32, logs, st.one_of(small, u32)),
    st.builds(GetDigest, u32, logs, st.one_of(small, u32), u32, st.one_of(small, u32)),
    st.builds(Trim, u32, logs, lsns),
    st.builds(LogInfo, u32, logs),
    st.builds(FindTime, u32, logs, st.integers(0, 2**63 - 1)),
    st.builds(GetLogDirectory, u32, logs),
    st.builds(CleanPoint, logs, lsns),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, max_size=25))
def test_nonsense_never_crashes_the_dispatch_nor_changes_final_records(msgs: list[object]) -> None:
    node = Harness()
    for msg in msgs:
        node.dispatch(decode_body(encode_body(msg)))  # as it arrives off the wire
    node.check_intact()

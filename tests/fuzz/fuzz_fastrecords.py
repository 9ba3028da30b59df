"""Coverage-guided fuzzing of the Kafka front's C record writer (atheris).

    .venv/bin/python tests/fuzz/fuzz_fastrecords.py -max_total_time=60

``_fastrecords.kafka_records`` reads a blob by tables of lengths and starts.
The front makes those tables itself, from stored batches that passed their
checksums, but the C code must not trust them: any tables, counts, ranges,
offsets and timestamps give records, None, or a ValueError (an OverflowError
for integers past 64 bits), never a read outside the blob or a crash.  And
for a real batch the records it writes are ``encode_columns``'s.
"""

from __future__ import annotations

import struct
import sys

import atheris

with atheris.instrument_imports():
    from logstrand.batch import make_batch, pack_extra
    from logstrand.client._views import BatchView, RecordRun
    from logstrand.kafka import _packed_records
    from logstrand.kafka._records import decode_batches

_fast = _packed_records._fast


def _int(fdp: atheris.FuzzedDataProvider, bits: int, edges: tuple[int, ...]) -> int:
    pick = fdp.ConsumeIntInRange(0, 2)
    if pick == 0:
        return int(fdp.PickValueInList(list(edges)))
    if pick == 1:
        return fdp.ConsumeIntInRange(-2, 80)
    return fdp.ConsumeIntInRange(-(2**bits), 2**bits - 1)


def _hostile(fdp: atheris.FuzzedDataProvider) -> None:
    # Mostly well-shaped calls (tables of the right size, ranges inside the
    # batch, lists long enough) with hostile values in them, so that the
    # calls get past the shape checks to the reads; sometimes a shape off.
    count = fdp.ConsumeIntInRange(1, 8)
    columns = 3 if fdp.ConsumeBool() else 2
    cells = columns * count + (
        fdp.ConsumeIntInRange(-1, 1) if fdp.ConsumeIntInRange(0, 9) == 0 else 0
    )
    cells = max(cells, 0)
    # Edges more often than a uniform draw would give them: ends that
    # overflow, lengths of -1 and of an extra's create time (11).
    starts = [_int(fdp, 63, (0, 1, 2**63 - 1, 2**63 - 8, -1)) for _ in range(cells)]
    lens = [_int(fdp, 31, (-1, 0, 1, 11, 2**31 - 1, -2)) for _ in range(cells)]
    first = fdp.ConsumeIntInRange(0, count - 1)
    n = (
        fdp.ConsumeIntInRange(1, count - first)
        if fdp.ConsumeIntInRange(0, 9)
        else fdp.ConsumeIntInRange(-1, 9)
    )
    offsets = [_int(fdp, 63, (0, 2**63 - 1, -(2**63))) for _ in range(count)]
    stamps = [_int(fdp, 63, (0, 2**63 - 1, -(2**63))) for _ in range(count)]
    blob = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    try:
        got = _fast.kafka_records(
            blob,
            struct.pack(f"<{cells}q", *starts),
            struct.pack(f"<{cells}i", *lens),
            count,
            first,
            n,
            offsets,
            0,
            stamps,
            0,
            columns == 3,
        )
    except (ValueError, OverflowError):
        return
    assert got is None or (type(got) is tuple and type(got[0]) is bytes)


def _real(fdp: atheris.FuzzedDataProvider) -> None:
    n = fdp.ConsumeIntInRange(1, 12)
    payloads = [
        fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40)) if fdp.ConsumeBool() else None
        for _ in range(n)
    ]
    keys = [
        fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8)) if fdp.ConsumeBool() else None
        for _ in range(n)
    ]
    extras = [
        pack_extra(fdp.ConsumeIntInRange(0, 2**40)) if fdp.ConsumeBool() else None for _ in range(n)
    ]
    lsns = list(range(1, n + 1))
    pb = make_batch(lsns, payloads, keys=keys, timestamps_ms=5, extras=extras)
    a = fdp.ConsumeIntInRange(0, n - 1)
    run = RecordRun(BatchView(pb, lsns[a], lsns[-1]), 0, n - a)
    offsets = list(range(100, 100 + len(run)))
    got = _packed_records.RunEncoder(run, offsets).batch(0, len(run), 1, 0)
    assert list(decode_batches(got)[0].values) == run.payloads


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeBool():
        _hostile(fdp)
    else:
        _real(fdp)


if __name__ == "__main__":
    if _fast is None:
        sys.exit("the C helper is not built (pip install -e . with a C compiler)")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()

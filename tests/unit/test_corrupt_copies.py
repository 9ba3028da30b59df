"""Copies that cannot be read: LogsDB names them (``read_packed(tolerant=True)``)
and reads on past them, whether our checksum or RocksDB's own fails."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from logstrand.batch import PackedBatch, make_batch
from logstrand.errors import CorruptionError
from logstrand.logsdb import LogsDB, PutBatch
from logstrand.testing import MemoryEngine, memory_logsdb

if TYPE_CHECKING:
    from pathlib import Path

E1 = 1 << 32


def batch(first: int, n: int, marker: bytes = b"") -> PackedBatch:
    lsns = range(first, first + n)
    # Random payloads: RocksDB stores their blocks uncompressed, so a byte of
    # them can be found in an SST file.
    payloads = [marker + os.urandom(200) for _ in lsns]
    return make_batch(lsns, payloads, timestamps_ms=1000)


def fill(db: LogsDB, starts: list[int], n: int = 100) -> None:
    for i, first in enumerate(starts):
        pb = PutBatch.of(1, batch(first, n, b"MARK%d:" % i), (1,), 1)
        db.write([pb], sync=True)


def lsns_read(db: LogsDB, **kw: object) -> tuple[list[int], list[tuple[int, int]]]:
    """Every LSN read (all chunks) and the unreadable ranges met."""
    got: list[int] = []
    bad: list[tuple[int, int]] = []
    start = E1 + 1
    for _ in range(1000):
        read = db.read_packed(1, start, tolerant=True, max_records=150, **kw)  # type: ignore[arg-type]
        for pb in read.batches:
            got += [x for x in pb.lsns() if x >= start]
        bad += [(u.first_lsn, u.last_lsn) for u in read.unreadable]
        if read.scanned_to >= (E1 | 0xFFFFFFFF) or (not read.batches and not read.unreadable):
            break
        start = read.scanned_to + 1
    return got, bad


STARTS = [E1 + 1, E1 + 101, E1 + 201, E1 + 301, E1 + 401]


def test_a_block_the_engine_cannot_read_is_named_and_passed() -> None:
    engine = MemoryEngine()
    db = memory_logsdb(engine)
    fill(db, STARTS)
    cf = f"p{db.partitions()[-1].id:010d}"
    engine.unreadable.add((cf, (1).to_bytes(8, "big") + (E1 + 201).to_bytes(8, "big")))
    got, bad = lsns_read(db)
    assert bad == [(E1 + 201, E1 + 300)]
    assert got == [x for x in range(E1 + 1, E1 + 501) if not E1 + 201 <= x <= E1 + 300]
    with pytest.raises(CorruptionError):
        db.read_packed(1)  # not tolerant: an error, as before
    # The last batch unreadable: the range runs to the end of the read.
    engine.unreadable.add((cf, (1).to_bytes(8, "big") + (E1 + 401).to_bytes(8, "big")))
    got, bad = lsns_read(db)
    assert bad[0] == (E1 + 201, E1 + 300)
    assert bad[1][0] == E1 + 401
    assert max(got) == E1 + 400


def test_a_value_that_fails_its_checksum_covers_its_own_lsns(tmp_path: Path) -> None:
    db = LogsDB.open(tmp_path / "db")
    fill(db, STARTS)
    cf = f"p{db.partitions()[-1].id:010d}"
    key = (1).to_bytes(8, "big") + (E1 + 101).to_bytes(8, "big")
    value = bytearray(db._engine.get(cf, key) or b"")
    value[-3] ^= 0x40  # in the body: the header still names its LSNs
    put = db._engine.new_batch()
    put.put(cf, key, bytes(value))
    db._engine.write(put, sync=True)
    got, bad = lsns_read(db)
    assert bad == [(E1 + 101, E1 + 200)]
    assert len(got) == 400
    # A header that fails its own checksum: the range runs to the next batch.
    value[20] ^= 0x01
    put = db._engine.new_batch()
    put.put(cf, key, bytes(value))
    db._engine.write(put, sync=True)
    got, bad = lsns_read(db)
    assert bad == [(E1 + 101, E1 + 200)]
    db.close()


def test_a_flipped_byte_in_an_sst_file(tmp_path: Path) -> None:
    """A payload byte flipped in an SST file: reads skip RocksDB's block
    checksums (``RocksEngine.items``), so the batch's own body checksum
    fails, and the unreadable range is that batch (with RocksDB's checks
    on, the block's keys were unknown and the range ran from the last good
    batch to the first readable key: here the same LSNs)."""
    path = tmp_path / "db"
    db = LogsDB.open(path)
    fill(db, STARTS)
    db.close()  # flushed to SST files on close
    ssts = [p for p in path.glob("*.sst") if b"MARK2:" in p.read_bytes()]
    assert len(ssts) == 1, "the batch should sit in one SST file"
    data = bytearray(ssts[0].read_bytes())
    data[data.index(b"MARK2:") + 2] ^= 0x20
    ssts[0].write_bytes(bytes(data))
    db = LogsDB.open(path)
    got, bad = lsns_read(db)
    assert bad == [(E1 + 201, E1 + 300)]
    assert got == [x for x in range(E1 + 1, E1 + 501) if not E1 + 201 <= x <= E1 + 300]
    db.close()

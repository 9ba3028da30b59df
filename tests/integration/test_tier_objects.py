"""Tiered objects in a real S3 API (moto's server on 127.0.0.1): written,
sought in from any LSN, and every way of going wrong reported as what it
is (``tier/_objects.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from logstrand.batch import make_batch
from logstrand.errors import InvalidArgumentError
from logstrand.testing import MotoServer, moto_available
from logstrand.testing._moto import CREDENTIALS
from logstrand.tier import Batch, CorruptObject, GapEntry, build
from logstrand.tier._objects import (
    ObjectMissing,
    ObjectStore,
    ObjectStoreError,
    TierTarget,
    open_object,
    read_from,
)
from logstrand.types import GapType, compose_lsn

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed")


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        server.create_bucket("tier")
        yield server


@pytest.fixture
def store(moto: MotoServer) -> ObjectStore:
    target = TierTarget.parse("s3://tier/cluster-a", moto.endpoint, env=CREDENTIALS)
    return ObjectStore(target, timeout_s=10)


def _entries(batches: int, per: int = 50) -> list[Batch | GapEntry]:
    out: list[Batch | GapEntry] = []
    lsn = compose_lsn(3, 1)
    for i in range(batches):
        lsns = list(range(lsn, lsn + per))
        payloads = [b"payload-%d-" % x + bytes(200) for x in lsns]
        packed = make_batch(lsns, payloads, timestamps_ms=1_700_000_000_000 + i, keys=None)
        out.append(Batch(packed.data, lsn, lsn + per - 1))
        lsn += per
    out.append(GapEntry(GapType.BRIDGE, lsn, lsn + 99))
    return out


def test_an_object_is_sought_in_from_any_lsn_with_read_ahead(store: ObjectStore) -> None:
    entries = _entries(400)  # ~5 MB: five blocks
    built = build(entries, 400 * 50)
    store.put("logs/7/a", built.data)
    size = store.size("logs/7/a")
    assert size == len(built.data)
    opened = open_object(store, "logs/7/a", size)
    assert len(opened.index) >= 4
    for lsn in (built.lo, built.lo + 12_345, opened.index[2].first, built.hi):
        got = read_from(store, opened, lsn, max_bytes=2 * 1024 * 1024)
        assert got, lsn
        assert got[0].lo == lsn
        want = [e for e in entries if e.hi >= lsn]
        assert [e.hi for e in got] == [e.hi for e in want][: len(got)]
    whole = read_from(store, opened, built.lo, max_bytes=len(built.data))
    assert [e.hi for e in whole] == [e.hi for e in entries]
    assert "logs/7/a" in store.names("logs/7")


def test_a_missing_object_and_a_corrupt_one_say_so(store: ObjectStore) -> None:
    with pytest.raises(ObjectMissing):
        store.size("logs/8/none")
    with pytest.raises(ObjectMissing):
        open_object(store, "logs/8/none", 1000)
    built = build(_entries(20), 1000)
    damaged = bytearray(built.data)
    damaged[100] ^= 1  # inside the first block
    store.put("logs/8/bad", bytes(damaged))
    opened = open_object(store, "logs/8/bad", len(damaged))  # the index is sound
    with pytest.raises(CorruptObject, match="checksum"):
        read_from(store, opened, built.lo, max_bytes=1 << 20)
    store.put("logs/8/cut", built.data[:-5])
    with pytest.raises(CorruptObject):
        open_object(store, "logs/8/cut", len(built.data) - 5)
    store.delete("logs/8/bad")
    store.delete("logs/8/bad")  # gone already: no error
    assert "logs/8/bad" not in store.names("logs/8")


def test_an_unreachable_store_is_an_error_to_retry(tmp_path: Path) -> None:
    from logstrand.testing import free_port

    target = TierTarget.parse("s3://tier", f"http://127.0.0.1:{free_port()}", env=CREDENTIALS)
    store = ObjectStore(target, timeout_s=2)
    with pytest.raises(ObjectStoreError) as caught:
        store.put("x", b"y")
    assert not isinstance(caught.value, ObjectMissing)
    # Each call: a listing's requests happen while it is walked, and an
    # error there (obstore's own type) once took a node down.
    for call, args in ((store.size, ("x",)), (store.read, ("x", 0, 1)), (store.names, ("logs",)),
                       (store.listing, ("logs",)), (store.delete, ("x",))):  # fmt: skip
        with pytest.raises(ObjectStoreError):
            call(*args)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("url", "endpoint", "why"),
    [
        ("s3:/nobucket", None, "s3://BUCKET"),
        ("http://bucket/x", None, "s3://BUCKET"),
        ("s3://bucket/x?y=1", None, "s3://BUCKET"),
        ("s3://bucket/x", "ftp://host", "an http"),
    ],
)
def test_a_bad_tier_url_is_a_clear_error(url: str, endpoint: str | None, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why):
        TierTarget.parse(url, endpoint, env={})


def test_credentials_come_from_a_file_before_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "creds"
    f.write_text("AWS_ACCESS_KEY_ID=from-file\nAWS_SECRET_ACCESS_KEY=s\n")
    t = TierTarget.parse("s3://b/p/", None, str(f), env={"AWS_ACCESS_KEY_ID": "from-env"})
    assert t.credentials["AWS_ACCESS_KEY_ID"] == "from-file"
    assert (t.bucket, t.prefix, t.key("k")) == ("b", "p", "p/k")
    with pytest.raises(InvalidArgumentError, match="--tier-credentials"):
        TierTarget.parse("s3://b", None, str(tmp_path / "none"), env={})

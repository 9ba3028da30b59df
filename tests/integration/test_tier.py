"""Tiered storage through a real cluster and a real S3 API (moto's server):
records move to objects and come back in order, with their keys, headers
and timestamps, through the objects (a deleted object is a DATALOSS gap,
not a silent skip); the record of them is in the epoch store; a trim
deletes the objects below it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.epochstore import SegmentField, open_epoch_store
from logstrand.testing import LocalCluster, MotoServer, moto_available
from logstrand.testing._moto import CREDENTIALS
from logstrand.types import LSN_OLDEST, Gap, GapType

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

from .tier_helpers import cli, credentials_file, records, wait

pytestmark = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed")


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, MotoServer]]:
    root = tmp_path_factory.mktemp("tier")
    creds = credentials_file(root)
    with MotoServer(root) as moto:
        moto.create_bucket("tier")
        args = ("--tier-url", "s3://tier/c1", "--tier-endpoint", moto.endpoint,
                "--tier-credentials", str(creds), "--tier-interval", "0.5",
                "--tier-object-size", "64KiB")  # fmt: skip
        with LocalCluster(root / "cluster", nodes=3, node_args=args) as c:
            yield c, moto


def _tier_state(c: LocalCluster, log: int) -> tuple[int, list[list[object]]]:
    with open_epoch_store(c.url) as store:
        return store.tier_state(log)


def test_records_move_to_objects_and_read_back_the_same(
    tiered: tuple[LocalCluster, MotoServer],
) -> None:
    c, moto = tiered
    cli(c, "logs", "create", "1", "--replication", "2", "--tier-after", "1s")
    with logstrand.connect(c.url) as client:
        lsns: list[int] = []
        for i in range(20):
            payloads = [b"record %d.%d " % (i, j) + bytes(300) for j in range(100)]
            keys = [b"key-%d" % (j % 7) for j in range(100)]
            headers = [[("h", b"%d" % j)] for j in range(100)]
            lsns += client.append_batch(1, payloads, keys=keys, headers=headers)
        before = list(client.read(1, LSN_OLDEST, lsns[-1]))
        # Everything appended goes to objects once a second old.
        wait("log 1 tiered", lambda: _tier_state(c, 1)[0] >= lsns[-1])
        point, segments = _tier_state(c, 1)
        assert len(segments) >= 5  # 64 KiB objects of ~660 KB of records
        # What info says of it (the console's log page shows the same).
        info = json.loads(cli(c, "info", "1", "--json"))["tier"]
        assert info["tiered_point"] == point
        assert info["objects"] == len(segments)
        assert (
            info["tiered_records"]
            == sum(int(s[SegmentField.RECORDS]) for s in segments)
            >= len(lsns)
        )
        assert info["tiered_bytes"] == sum(int(s[SegmentField.BYTES]) for s in segments)
        assert "tiered" in cli(c, "info", "1")
        from logstrand.tier import ObjectStore, TierTarget

        store = ObjectStore(TierTarget.parse("s3://tier/c1", moto.endpoint, env=CREDENTIALS))
        names = set(store.names("logs/1"))
        assert {str(s[SegmentField.KEY]) for s in segments} <= names
        # An object taken away whose records the nodes still hold (no local
        # retention here): the reader reads them from the nodes, and every
        # record comes back as it was appended.  (It got a DATALOSS gap
        # over the object's range before; test_tier_local shows the gap
        # once the nodes dropped their copies too.)
        victim = segments[1]
        store.delete(str(victim[SegmentField.KEY]))
        after = list(client.read(1, LSN_OLDEST, lsns[-1]))
        assert [g for g in after if isinstance(g, Gap) and g.type == GapType.DATALOSS] == []
        assert records(after) == records(before)


def test_a_trim_deletes_the_objects_below_it(tiered: tuple[LocalCluster, MotoServer]) -> None:
    c, moto = tiered
    cli(c, "logs", "create", "2", "--replication", "2", "--tier-after", "1s")
    with logstrand.connect(c.url) as client:
        lsns = []
        for _ in range(10):
            lsns += client.append_batch(2, [b"x" * 400] * 100)
        wait("log 2 tiered", lambda: _tier_state(c, 2)[0] >= lsns[-1])
        _, segments = _tier_state(c, 2)
        first = segments[0]
        client.trim(2, int(first[SegmentField.LAST]) + 1)
        wait(
            "the trimmed segment forgotten",
            lambda: all(
                s[SegmentField.KEY] != first[SegmentField.KEY] for s in _tier_state(c, 2)[1]
            ),
        )
        from logstrand.tier import ObjectStore, TierTarget

        store = ObjectStore(TierTarget.parse("s3://tier/c1", moto.endpoint, env=CREDENTIALS))
        assert str(first[SegmentField.KEY]) not in store.names("logs/2")
        got = list(client.read(2, LSN_OLDEST, lsns[-1]))
        assert [r.lsn for r in records(got)] == [
            x for x in lsns if x > first[SegmentField.LAST] + 1
        ]


def test_an_unreachable_store_holds_nothing_up_and_the_offload_catches_up(
    tmp_path: Path,
) -> None:
    """The object store goes away: appends and reads go on, no node falls,
    the failures are counted (the alert's metric); it comes back, and the
    offload catches up by itself."""
    creds = credentials_file(tmp_path)
    moto = MotoServer(tmp_path)
    moto.start()
    try:
        moto.create_bucket("tier")
        args = ("--tier-url", "s3://tier/c2", "--tier-endpoint", moto.endpoint,
                "--tier-credentials", str(creds), "--tier-interval", "0.5")  # fmt: skip
        with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
            cli(c, "logs", "create", "5", "--replication", "2", "--tier-after", "1s")
            moto.stop()
            with logstrand.connect(c.url) as client:
                lsns = []
                for _ in range(10):
                    lsns += client.append_batch(5, [b"y" * 300] * 50)

                def failures() -> float:
                    name = "logstrand_tier_offload_failures_total"
                    return sum(c.metric(n, name, 0.0) for n in (1, 2, 3))

                wait("the failed offloads counted", lambda: failures() >= 2)
                assert all(c.alive(n) for n in (1, 2, 3))
                assert _tier_state(c, 5)[0] == 0
                got = records(list(client.read(5, LSN_OLDEST, lsns[-1])))
                assert [r.lsn for r in got] == lsns
                moto.start()  # the same port, empty: as after a long outage
                moto.create_bucket("tier")
                wait(
                    "log 5 tiered once the store is back", lambda: _tier_state(c, 5)[0] >= lsns[-1]
                )
                again = records(list(client.read(5, LSN_OLDEST, lsns[-1])))
                assert again == got
    finally:
        moto.stop()


def test_a_compacted_log_keeps_every_key_across_the_tier_boundary(
    tiered: tuple[LocalCluster, MotoServer],
) -> None:
    """Compaction of a tiered keyed log: the cleaner reads across the
    boundary (through the objects), the nodes drop the superseded copies
    they hold, and a reader still gets the latest record of every key at its
    own LSN.  Objects are never rewritten: a reader of the tiered range may
    also get superseded records there (as a Kafka consumer may before its
    cleaner runs), each the same as appended."""
    from logstrand.epochstore import LogAttributes

    c, _ = tiered
    with open_epoch_store(c.url) as store:
        attributes = LogAttributes(
            replication_factor=2, cleanup_policy="compact", tier_after_ms=1000
        )
        store.create_logs(5, 5, attributes)
    with logstrand.connect(c.url) as client:
        appended: dict[int, tuple[bytes, bytes]] = {}
        for r in range(10):
            keys = [b"key-%d" % k for k in range(20)]
            payloads = [b"round %d " % r + bytes(300) for _ in keys]
            for lsn, k, p in zip(
                client.append_batch(5, payloads, keys=keys), keys, payloads, strict=True
            ):
                appended[lsn] = (k, p)
            if r == 4:  # the first half in objects before the rest comes
                half = max(appended)
                wait("log 5's first half tiered", lambda h=half: _tier_state(c, 5)[0] >= h)
        stats = client.compact(5)
        assert stats["records_removed"] > 0
        got = records(list(client.read(5, LSN_OLDEST, max(appended))))
    latest = {k: lsn for lsn, (k, _) in sorted(appended.items())}
    assert all(appended[r.lsn] == (r.key, r.payload) for r in got)  # each as appended
    read = {r.lsn for r in got}
    assert set(latest.values()) <= read  # the latest of every key
    assert [r.lsn for r in got] == sorted(read)

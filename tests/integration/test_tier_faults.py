"""Tiered storage against an object store that misbehaves: an HTTP proxy
in front of moto's server (``testing.S3Faults``) makes requests slow,
answers some with S3's 503 SlowDown, or holds a node's PUT while the test
kills the node.  Appends go on, no node falls, no object is recorded that
is not whole, and every record reads back."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.epochstore import SegmentField, open_epoch_store
from logstrand.placement import rendezvous_owner
from logstrand.testing import LocalCluster, MotoServer, S3Faults, moto_available
from logstrand.testing._moto import CREDENTIALS
from logstrand.tier import ObjectStore, TierTarget
from logstrand.types import LSN_OLDEST, Record

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

from .tier_helpers import cli, credentials_file, wait

pytestmark = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed")


def _point(c: LocalCluster, log: int) -> int:
    with open_epoch_store(c.url) as store:
        return store.tier_points([log])[log]


def _whole(c: LocalCluster, moto: MotoServer, log: int) -> None:
    """Every recorded segment names an object that is in the store whole."""
    store = ObjectStore(TierTarget.parse("s3://tier/f", moto.endpoint, env=CREDENTIALS))
    with open_epoch_store(c.url) as es:
        _, segments = es.tier_state(log)
    assert segments
    for s in segments:
        assert store.size(str(s[SegmentField.KEY])) == int(s[SegmentField.BYTES])


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[tuple[LocalCluster, MotoServer, S3Faults]]:
    creds = credentials_file(tmp_path)
    with MotoServer(tmp_path) as moto, S3Faults(moto.endpoint, seed=7) as proxy:
        moto.create_bucket("tier")
        args = ("--tier-url", "s3://tier/f", "--tier-endpoint", proxy.endpoint,
                "--tier-credentials", str(creds), "--tier-interval", "0.3",
                "--tier-object-size", "32KiB", "--tier-orphan-age", "2s")  # fmt: skip
        with LocalCluster(tmp_path / "c", nodes=3, node_args=args) as c:
            yield c, moto, proxy


def test_a_slow_store_that_errs_loses_nothing_and_stops_no_append(
    faulty: tuple[LocalCluster, MotoServer, S3Faults],
) -> None:
    c, moto, proxy = faulty
    proxy.delay_s, proxy.error_rate = 0.05, 0.3
    cli(c, "logs", "create", "1", "--replication", "2", "--tier-after", "1s")
    with logstrand.connect(c.url) as client:
        lsns: list[int] = []
        for i in range(10):
            lsns += client.append_batch(1, [b"slow %d " % i + bytes(300)] * 50)
        want = [r for r in client.read(1, LSN_OLDEST, lsns[-1]) if isinstance(r, Record)]
        wait("log 1 tiered through the faults", lambda: _point(c, 1) >= lsns[-1])
        assert proxy.faulted > 0  # the store did err
        assert all(c.alive(n) for n in (1, 2, 3))
        more = client.append_batch(1, [b"after"] * 10)  # appends never waited on the store
        got = [r for r in client.read(1, LSN_OLDEST, lsns[-1]) if isinstance(r, Record)]
        assert got == want
        assert [r.lsn for r in client.read(1, more[0], more[-1]) if isinstance(r, Record)] == more
    proxy.delay_s, proxy.error_rate = 0.0, 0.0
    _whole(c, moto, 1)


def test_a_node_killed_mid_upload_records_nothing_and_another_uploads(
    faulty: tuple[LocalCluster, MotoServer, S3Faults],
) -> None:
    c, moto, proxy = faulty
    proxy.hold_puts = True
    cli(c, "logs", "create", "2", "--replication", "2", "--tier-after", "1s")
    with logstrand.connect(c.url) as client:
        lsns = [x for i in range(5) for x in client.append_batch(2, [b"k%d" % i * 200] * 50)]
        want = [r for r in client.read(2, LSN_OLDEST, lsns[-1]) if isinstance(r, Record)]
    wait("an upload held mid-PUT", lambda: proxy.held >= 1)
    owner = rendezvous_owner(2, {1: 1.0, 2: 1.0, 3: 1.0})
    c.kill_node(owner)  # SIGKILL while its PUT is in flight
    time.sleep(0.5)
    assert _point(c, 2) == 0  # nothing recorded
    proxy.release()  # its PUT's connection is gone: nothing reaches the store
    # The next owner among the nodes up uploads the range itself.
    wait("log 2 tiered by another node", lambda: _point(c, 2) >= lsns[-1])
    _whole(c, moto, 2)
    c.start_node(owner)
    with logstrand.connect(c.url) as client:
        got = [r for r in client.read(2, LSN_OLDEST, lsns[-1]) if isinstance(r, Record)]
    assert got == want
    # An object no segment names (what a node killed between its PUT and
    # the record leaves) goes once older than --tier-orphan-age; the
    # recorded ones stay.
    store = ObjectStore(TierTarget.parse("s3://tier/f", moto.endpoint, env=CREDENTIALS))
    orphan = "logs/2/0000000100000001-0000000100000002-n9-dead"
    store.put(orphan, b"half of nothing")

    def orphans() -> float:
        return sum(c.metric(n, "logstrand_tier_offload_orphans_total", 0.0) for n in (1, 2, 3))

    # (Counted once the delete has returned: the count may come a moment after.)
    wait("the orphan deleted", lambda: orphan not in store.names("logs/2") and orphans() >= 1)
    _whole(c, moto, 2)

"""Tiered storage's local drop, through a real cluster and a real S3 API
(moto's server): once a tiered log's records are in objects and older than
its ``--local-retention``, the nodes drop their copies (whole partitions),
and every reader still gets them all, in order and the same: ``read``,
``read_many`` and a Kafka consumer's Fetch.  That they come from the object
store, not from copies left somewhere, shows when the store goes away."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand.epochstore import open_epoch_store
from logstrand.errors import LogstrandError
from logstrand.testing import LocalCluster, MotoServer, moto_available
from logstrand.tier import ObjectStore, TierTarget
from logstrand.types import LSN_OLDEST, Gap, GapType
from logstrand.types import SegmentField as F

if TYPE_CHECKING:
    from pathlib import Path

from .tier_helpers import cli, credentials_file, records, wait

pytestmark = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed")


def test_dropped_copies_are_read_from_the_objects_by_every_reader(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    creds = credentials_file(tmp_path)
    with MotoServer(tmp_path) as moto:
        moto.create_bucket("tier")
        # No cache: what a reader gets below the floors comes from the store.
        args = ("--tier-url", "s3://tier/local", "--tier-endpoint", moto.endpoint,
                "--tier-credentials", str(creds), "--tier-interval", "0.3",
                "--tier-object-size", "64KiB", "--tier-cache", "0", "--partition-duration", "1s",
                "--maintenance-interval", "0.3", "--compaction-interval", "0")  # fmt: skip
        with LocalCluster(tmp_path / "c", nodes=3, kafka=True, node_args=args) as c:
            admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
            for future in admin.create_topics([NewTopic("cold", 1, 2)]).values():
                future.result(30)
            with open_epoch_store(c.url) as store:
                log = store.log_range_named("cold").first
            cli(c, "logs", "update", str(log), "--tier-after", "1s", "--local-retention", "1s")
            with logstrand.connect(c.url) as client:
                lsns: list[int] = []
                for i in range(4):  # four partitions' worth, 1.2 s apart
                    payloads = [b"cold %d.%d " % (i, j) + bytes(200) for j in range(200)]
                    keys = [b"k%d" % (j % 5) for j in range(200)]
                    headers = [[("n", b"%d" % j)] for j in range(200)]
                    lsns += client.append_batch(log, payloads, keys=keys, headers=headers)
                    time.sleep(1.2)
                before = list(client.read(log, LSN_OLDEST, lsns[-1]))
                assert [r.lsn for r in records(before)] == lsns

                def dropped() -> int:
                    name = "logstrand_partitions_dropped_total"
                    return sum(c.metric(n, name, 0.0) > 0 for n in (1, 2, 3))

                # The nodes drop what is tiered and a second old: whole
                # partitions, the newest always kept.  Both copies' holders
                # at least (the topic's nodeset may have two nodes or three).
                wait("the nodes dropped tiered partitions", lambda: dropped() >= 2)

                def tier_reads() -> float:  # blocks the nodes read for readers
                    names = ("logstrand_tier_cache_hits_total", "logstrand_tier_cache_misses_total")
                    return sum(c.metric(n, name, 0.0) for n in (1, 2, 3) for name in names)

                ahead = tier_reads()

                # read: from the objects below the nodes' floors, then the nodes.
                got = list(client.read(log, LSN_OLDEST, lsns[-1]))
                assert records(got) == records(before)
                assert tier_reads() > ahead
                ahead = tier_reads()
                # (A read from LSN 1 once met a TRIM gap below e1n1 there.)
                assert [g for g in got if isinstance(g, Gap)] == []
                # read_many had no tier phase of its own: the nodes' floors send it there.
                many = [r for _, r in client.read_many({log: LSN_OLDEST}, until=lsns[-1])]
                assert records(many) == records(before)
                assert tier_reads() > ahead

                # find_time below the nodes' floors: the objects answer (the
                # nodes alone once said the first LSN they still held).
                stamps = [r.timestamp for r in records(before)]
                for i in (0, 200, 400, 600):
                    assert client.find_time(log, stamps[i]) == lsns[i], i
                assert client.find_time(log, 0) == lsns[0]

                # A Kafka consumer's Fetch: every offset, key, value and header.
                consumer = Consumer(
                    {"bootstrap.servers": c.kafka_bootstrap, "group.id": "cold-r",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"}
                )  # fmt: skip
                try:
                    consumer.assign([TopicPartition("cold", 0, 0)])
                    fetched = []
                    deadline = time.monotonic() + 60
                    while len(fetched) < len(lsns) and time.monotonic() < deadline:
                        m = consumer.poll(0.2)
                        if m is not None:
                            assert m.error() is None, m.error()
                            fetched.append((m.key(), m.value(), m.headers()))
                finally:
                    consumer.close()
                want = [(r.key, r.payload, list(r.headers)) for r in records(before)]
                assert fetched == want

                # An object lost after the nodes dropped their copies: a
                # DATALOSS gap from its first LSN, over no more than its
                # range, and every other record as it was.
                with open_epoch_store(c.url) as store:
                    _, segments = store.tier_state(log)
                victim = next(seg for seg in segments if seg[F.LAST] < lsns[200])
                objects = ObjectStore(TierTarget.parse("s3://tier/local", moto.endpoint,
                                                       credentials_file=str(creds)))  # fmt: skip
                objects.delete(str(victim[F.KEY]))
                after = list(client.read(log, LSN_OLDEST, lsns[-1]))
                gaps = [g for g in after if isinstance(g, Gap)]
                assert [g.type for g in gaps] == [GapType.DATALOSS]
                assert gaps[0].lo == victim[F.FIRST]
                assert gaps[0].hi <= victim[F.LAST]
                assert records(after) == [
                    r for r in records(before) if not gaps[0].lo <= r.lsn <= gaps[0].hi
                ]

                # The store gone: what the nodes dropped cannot be read (an
                # error, never a silent skip); appends and fresh records go on.
                moto.stop()
                with pytest.raises(LogstrandError, match="tiered records"):
                    list(client.read(log, LSN_OLDEST, lsns[-1]))
                fresh = client.append_batch(log, [b"fresh"] * 10)
                kept = list(client.read(log, fresh[0], fresh[-1]))
                assert [r.lsn for r in records(kept)] == fresh


def test_a_rebuilt_node_recreates_no_tiered_copy(tmp_path: Path) -> None:
    """A node loses its disk and is rebuilt: the copies of a log that keeps
    less on the nodes (``--local-retention``) at or below its tiered point
    are in the object store, so the donors re-create only the copies above
    it; every record still reads back, also with another node down."""
    from logstrand.logsdb import LogsDB

    creds = credentials_file(tmp_path)
    with MotoServer(tmp_path) as moto:
        moto.create_bucket("tier")
        # A long local retention: the nodes still hold every copy, so only
        # the donors' rule keeps the tiered ones from being re-created.
        args = ("--tier-url", "s3://tier/rebuilt", "--tier-endpoint", moto.endpoint,
                "--tier-credentials", str(creds), "--tier-interval", "0.3",
                "--rebuild-settle", "0.5")  # fmt: skip
        with LocalCluster(tmp_path / "c", nodes=4, node_args=args) as c:
            # Log 2 is tiered whole: a donor holding only tiered copies is
            # done with it, not behind (it held the run open once).
            cli(c, "logs", "create", "1..2", "--replication", "2", "--tier-after", "1s",
                 "--local-retention", "1h")  # fmt: skip
            with logstrand.connect(c.url) as client:
                old = [x for _ in range(5) for x in client.append_batch(1, [b"o" * 300] * 100)]
                whole = client.append_batch(2, [b"w" * 300] * 100)
                with open_epoch_store(c.url) as store:

                    def tiered() -> bool:
                        points = store.tier_points([1, 2])
                        return points[1] >= old[-1] and points[2] >= whole[-1]

                    wait("logs 1 and 2 tiered", tiered)
                    points = store.tier_points([1, 2])
                    point = points[1]
                # Nothing more moves: the tiered points stay where they are.
                cli(c, "logs", "update", "1..2", "--tier-after", "1h")
                new = client.append_batch(1, [b"n" * 300] * 100)
                # A node holding copies of both kinds (log 1's nodeset may
                # leave a node out).
                segments = client.log_directory(1)
                lost = min(
                    {s.node_id for s in segments if s.last_lsn > point}
                    & {s.node_id for s in segments if s.first_lsn <= point}
                )
            c.stop_node(lost)
            with LogsDB.open(c.nodes[lost].data_dir) as db:
                held = [r.lsn for r in db.iter_records(1)]
                # Every copy the donors must re-create: above each log's
                # tiered point (a recovery's record may sit above log 2's).
                others = [r.lsn for r in db.iter_records(2) if r.lsn > points[2]]
                logs = set(db.logs())
            above = [x for x in held if x > point]
            assert len(held) > len(above) > 0
            assert logs <= {1, 2}
            c.wipe_node(lost)
            done = subprocess.run(
                [sys.executable, "-m", "logstrand", "rebuild", str(lost), "--wait", "--json",
                 "--url", c.url],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            out = json.loads(done.stdout.strip().splitlines()[-1])
            # No copy at or below the tiered points (the node held
            # len(held) copies of log 1; all were re-created before).  The
            # count is a bound, not a number: a recovery's bridge record
            # above log 2's point may or may not be servable yet, and the
            # CLI's last figures may come before every donor reported.
            assert out["last"]["records"] <= len(above) + len(others)
            c.kill_node(next(n for n in (1, 2, 3, 4) if n != lost))
            with logstrand.connect(c.url) as client:
                assert [
                    r.lsn for r in records(list(client.read(2, LSN_OLDEST, whole[-1])))
                ] == whole
                got = records(list(client.read(1, LSN_OLDEST, new[-1])))
            assert [r.lsn for r in got] == old + new

"""Kafka consumer groups through the front: a big group's join, and many
groups' commits at once.

    python bench/groups.py [--members 100] [--partitions 1000] [--groups 1000] [--seconds 20]

A local 3-node cluster serving Kafka (``kafka=True``).  Both phases speak the
Kafka protocol with the front's own codec over asyncio sockets (one
connection per member or group, as real clients have), so that what is
measured is the coordinator, not a client library:

* **join**: ``--members`` members of one group, subscribed to a topic of
  ``--partitions`` partitions, join at once with the classic protocol
  (JoinGroup v5: each is first told its member id, then joins with it);
  the leader assigns the partitions round-robin and every member syncs.
  Reported: the time from the first JoinGroup sent until every member has
  its assignment (issue 37's aim: under 5 s for 100 members on 1,000
  partitions), and that the assignments cover every partition once.
* **commits**: ``--groups`` groups, each with its own connection to its
  coordinator (FindCoordinator first), commit one offset a second
  (OffsetCommit v8, a plain commit: generation -1, no member) for
  ``--seconds``; reported: commits done and their latency p50/p99/max, of
  all and of those after the first 5 s (aim: p99 under 50 ms at 1,000 groups).
  Twice: with the groups' seconds evenly spread (consumers started
  independently), then in a burst (every group at the same instant of each
  second: 1,000 commits at once, the worst case).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.kafka import _protocol as proto
from logstrand.testing import LocalCluster, cpu_s

TOPIC_FIRST = 5000
#: The commit figures are also given without the first seconds.
WARM_S = 5.0


class Conn:
    """One Kafka connection: a request at a time, its answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.corr = 0

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        return cls(*await asyncio.open_connection(host, port))

    async def ask(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.corr += 1
        self.writer.write(proto.encode_request(key, version, self.corr, body))
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        corr, answer = proto.decode_response(key, version, await self.reader.readexactly(size))
        assert corr == self.corr
        return answer

    def close(self) -> None:
        self.writer.close()


async def coordinator(bootstrap: tuple[str, int], group: str) -> tuple[str, int]:
    c = await Conn.open(*bootstrap)
    try:
        found = await c.ask(10, 3, {"key": group, "key_type": 0})
        assert found["error_code"] == 0, found
        return found["host"], found["port"]
    finally:
        c.close()


def subscription(topic: str) -> bytes:
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def assignment(topic: str, parts: list[int]) -> bytes:
    name = topic.encode()
    head = struct.pack(">hih", 0, 1, len(name)) + name
    return head + struct.pack(f">i{len(parts)}i", len(parts), *parts) + struct.pack(">i", -1)


async def member(
    where: tuple[str, int], group: str, topic: str, partitions: int, done: list[float]
) -> list[int]:
    c = await Conn.open(*where)
    join = {
        "group_id": group,
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 60_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "roundrobin", "metadata": subscription(topic)}],
    }
    first = await c.ask(11, 5, join)
    assert first["error_code"] == 79, first  # MEMBER_ID_REQUIRED
    joined = await c.ask(11, 5, {**join, "member_id": first["member_id"]})
    assert joined["error_code"] == 0, joined
    assignments = []
    if joined["members"]:  # the leader assigns round-robin
        ids = sorted(m["member_id"] for m in joined["members"])
        for i, mid in enumerate(ids):
            mine = list(range(i, partitions, len(ids)))
            assignments.append({"member_id": mid, "assignment": assignment(topic, mine)})
    synced = await c.ask(
        14,
        3,
        {
            "group_id": group,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "assignments": assignments,
        },
    )
    assert synced["error_code"] == 0, synced
    done.append(time.monotonic())
    raw = synced["assignment"]
    (n,) = struct.unpack_from(">i", raw, 6 + 2 + len(topic))
    parts = list(struct.unpack_from(f">{n}i", raw, 6 + 2 + len(topic) + 4))
    await c.ask(13, 3, {"group_id": group, "members": [{"member_id": joined["member_id"]}]})
    c.close()
    return parts


async def join_phase(bootstrap: tuple[str, int], members: int, partitions: int) -> dict[str, Any]:
    group, topic = "big-group", "wide"
    where = await coordinator(bootstrap, group)
    done: list[float] = []
    start = time.monotonic()
    got = await asyncio.gather(
        *(member(where, group, topic, partitions, done) for _ in range(members))
    )
    every = sorted(p for parts in got for p in parts)
    assert every == list(range(partitions)), "the assignment does not cover every partition once"
    return {"members": members, "partitions": partitions, "join_s": round(max(done) - start, 3)}


async def committer(
    bootstrap: tuple[str, int],
    group: str,
    seconds: float,
    start: float,
    phase: float,
    lat: list[tuple[float, float]],
) -> None:
    c = await Conn.open(*await coordinator(bootstrap, group))
    offset = 0
    await asyncio.sleep(max(0.0, start + phase - time.monotonic()))
    while time.monotonic() < start + seconds:
        offset += 1
        body = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": "wide",
                    "partitions": [
                        {
                            "partition_index": offset % 8,
                            "committed_offset": offset,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        t0 = time.monotonic()
        answer = await c.ask(8, 8, body)
        lat.append((t0 - start, time.monotonic() - t0))
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    c.close()


def _figures(lat: list[float], seconds: float) -> dict[str, Any]:
    lat = sorted(lat)
    return {
        "commits": len(lat),
        "per_s": round(len(lat) / seconds),
        "p50_ms": round(statistics.median(lat) * 1000, 1),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1),
    }


async def commit_phase(
    bootstrap: tuple[str, int], groups: int, seconds: float, *, burst: bool
) -> dict[str, Any]:
    """All commits, and those after the first 5 s (each group's first commit,
    when its coordinator reads the group's positions log, is in the first).
    ``burst``: every group commits at the same instant of each second (the
    worst case); else their seconds start evenly spread over one, as
    consumers started independently commit."""
    lat: list[tuple[float, float]] = []
    start = time.monotonic() + 5.0  # every connection made first
    await asyncio.gather(
        *(
            committer(bootstrap, f"bench-{i}", seconds, start, 0.0 if burst else i / groups, lat)
            for i in range(groups)
        )
    )
    steady = [d for t, d in lat if t >= WARM_S]
    return {
        "groups": groups,
        "burst": burst,
        "all": _figures([d for _, d in lat], seconds),
        "after_5s": _figures(steady, seconds - WARM_S),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp) / "c", nodes=3, kafka=True) as c,
    ):
        with open_epoch_store(c.url) as store:
            last = TOPIC_FIRST + args.partitions - 1
            store.create_logs(TOPIC_FIRST, last, LogAttributes(replication_factor=2), name="wide")
        host, port = c.kafka_bootstrap.split(",")[0].split(":")
        bootstrap = (host, int(port))
        print("join", asyncio.run(join_phase(bootstrap, args.members, args.partitions)), flush=True)
        pids = [p.pid for p in c.procs.values()]
        for burst in (False, True):
            cpu0, t0 = cpu_s(pids), time.monotonic()
            figures = asyncio.run(commit_phase(bootstrap, args.groups, args.seconds, burst=burst))
            # The nodes' CPU over the phase (its 5 s of connecting included):
            # cores busy, and per commit.
            cpu = cpu_s(pids) - cpu0
            figures["nodes_cores"] = round(cpu / (time.monotonic() - t0), 2)
            figures["nodes_cpu_ms_per_commit"] = round(cpu * 1000 / figures["all"]["commits"], 2)
            print("commits", figures, flush=True)


if __name__ == "__main__":
    main()

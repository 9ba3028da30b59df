"""Members of a logstrand group (``client.subscribe``) in processes of their
own (``subscribe_member.py``): they share a group's logs, a member that
joins takes half of them with no record read twice, a member that is
killed has its logs taken over within its session, one that leaves hands
them over at once, and ``groups describe`` names who reads what."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

import logstrand
from logstrand.cli import main
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.errors import InvalidArgumentError
from logstrand.records import positions_log_of
from logstrand.testing import LocalCluster

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.slow

MEMBER = Path(__file__).with_name("subscribe_member.py")
SESSION_S = 3.0
LOGS = range(1, 7)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("subscribe") / "c",
        nodes=3,
        node_args=("--group-session-ms", str(int(SESSION_S * 1000))),
    ) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 12, LogAttributes(replication_factor=2))
        yield c


def _wait(what: str, ok: Callable[[], bool], timeout_s: float = 60.0) -> float:
    start = time.monotonic()
    while not ok():
        assert time.monotonic() - start < timeout_s, f"no {what} after {timeout_s} s"
        time.sleep(0.05)
    return time.monotonic() - start


class Member:
    """One member process and what it wrote."""

    def __init__(self, tmp: Path, cluster: LocalCluster, group: str, name: str) -> None:
        self.out = tmp / f"{name}.events"
        self.log = open(tmp / f"{name}.log", "ab")  # noqa: SIM115
        argv = [sys.executable, str(MEMBER), cluster.url, group, "1", "6", str(self.out)]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def events(self) -> list[list[str]]:
        if not self.out.exists():
            return []
        # Whole lines only: the last may be half written.
        return [line.split(" ") for line in self.out.read_text().split("\n")[:-1] if line]

    def assigned(self) -> list[int] | None:
        last = [e for e in self.events() if e[0] == "assigned"]
        if not last:
            return None
        return [int(x) for x in "".join(last[-1][2:]).split(",") if x]

    def assigned_at(self, logs: list[int]) -> float | None:
        """When the member first read exactly ``logs``."""
        for e in self.events():
            if e[0] == "assigned" and [int(x) for x in "".join(e[2:]).split(",") if x] == logs:
                return float(e[1])
        return None

    def got(self) -> list[tuple[float, int, str]]:
        return [(float(e[1]), int(e[2]), e[4]) for e in self.events() if e[0] == "got"]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def members(tmp_path: Path, cluster: LocalCluster) -> Iterator[Callable[[str, str], Member]]:
    started: list[Member] = []

    def start(group: str, name: str) -> Member:
        m = Member(tmp_path, cluster, group, name)
        started.append(m)
        return m

    yield start
    for m in started:
        m.stop(signal.SIGKILL)


def _append(cluster: LocalCluster, tag: str, per_log: int) -> set[str]:
    sent = set()
    with logstrand.connect(cluster.url) as client:
        for log in LOGS:
            batch = [f"{log}-{tag}-{i}" for i in range(per_log)]
            client.append_batch(log, [p.encode() for p in batch])
            sent.update(batch)
    return sent


def _seen(*ms: Member) -> Counter[str]:
    return Counter(p for m in ms for _t, _log, p in m.got())


def _handovers(a: Member, b: Member) -> int:
    """The most times a log went from one member to the other, in the order
    they handed its records out (a member still delivering a log after the
    other began would add two or more)."""
    most = 0
    for log in LOGS:
        order = sorted(
            [(t, "a") for t, lg, _p in a.got() if lg == log]
            + [(t, "b") for t, lg, _p in b.got() if lg == log]
        )
        most = max(most, sum(1 for x, y in itertools.pairwise(order) if x[1] != y[1]))
    return most


def test_members_share_the_logs_and_take_over_from_one_killed(
    cluster: LocalCluster,
    members: Callable[[str, str], Member],
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = "sub-share"
    sent = _append(cluster, "a", 20)
    a = members(group, "a")
    _wait("all logs to the first member", lambda: a.assigned() == list(LOGS))
    _wait("the first records", lambda: set(_seen(a)) >= sent)

    # A second member: each reads half, no record read twice (the first
    # committed what it had handed out before giving logs up).
    b = members(group, "b")
    _wait(
        "the logs split",
        lambda: (
            len(a.assigned() or []) == 3
            and sorted((a.assigned() or []) + (b.assigned() or [])) == list(LOGS)
        ),
    )
    sent |= _append(cluster, "b", 20)
    _wait("the second records", lambda: set(_seen(a, b)) >= sent)
    assert max(_seen(a, b).values()) == 1, "a record was read twice in a handover"
    assert _handovers(a, b) <= 1

    # `groups describe` names the member of each log, and its logs (once
    # every log's position is committed: autocommit, every second).
    with logstrand.connect(cluster.url) as client:
        _wait("positions of every log", lambda: len(client.describe_group(group)) == len(LOGS))
    capsys.readouterr()
    assert main(["groups", "describe", group, "--url", cluster.url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_member: dict[str, list[int]] = {}
    for row in rows:
        by_member.setdefault(row["member"], []).append(row["log_id"])
    assert sorted(map(sorted, by_member.values())) == sorted([a.assigned(), b.assigned()])
    assert main(["groups", "describe", group, "--url", cluster.url]) == 0
    shown = capsys.readouterr().out
    assert "consumer group" in shown
    assert "logs" in shown

    # Killed: its logs go to the other within its session (+ 1 s), and every
    # record is read at least once.
    b.stop(signal.SIGKILL)
    killed = time.time()
    _wait("the killed member's logs taken over", lambda: a.assigned() == list(LOGS))
    took = (a.assigned_at(list(LOGS)) or 0.0) - killed
    assert took <= SESSION_S + 1.0, took
    sent |= _append(cluster, "c", 20)
    _wait("every record", lambda: set(_seen(a, b)) >= sent)


def test_a_member_that_leaves_hands_its_logs_over_at_once(
    cluster: LocalCluster, members: Callable[[str, str], Member]
) -> None:
    group = "sub-leave"
    sent = _append(cluster, "x", 10)
    a = members(group, "a")
    _wait("all logs to the first member", lambda: a.assigned() == list(LOGS))
    b = members(group, "b")
    _wait("the logs split", lambda: len(a.assigned() or []) == 3 and len(b.assigned() or []) == 3)
    sent |= _append(cluster, "y", 10)
    _wait("the records", lambda: set(_seen(a, b)) >= sent)
    b.stop(signal.SIGTERM)
    left = time.time()
    assert b.events()[-1] == ["left"]
    _wait("the leaver's logs taken over", lambda: a.assigned() == list(LOGS))
    took = (a.assigned_at(list(LOGS)) or 0.0) - left
    assert took < 2.0, took  # no session to wait for
    sent |= _append(cluster, "z", 10)
    _wait("every record", lambda: set(_seen(a, b)) >= sent)
    assert max(_seen(a, b).values()) == 1, "a record was read twice after a clean leave"
    assert _handovers(a, b) <= 2  # to b when it joined, back to a when it left


def test_members_of_a_group_subscribe_to_the_same_logs(cluster: LocalCluster) -> None:
    async def run() -> None:
        async with logstrand.open_client(cluster.url) as client:
            async with client.subscribe("sub-same", [1, 2, 3]) as first:
                await first.start()
                other = client.subscribe("sub-same", [4, 5])
                with pytest.raises(InvalidArgumentError, match="same logs"):
                    await other.start()
                await other.aclose()
            with pytest.raises(InvalidArgumentError, match="at least one log"):
                await client.subscribe("sub-same", []).start()
            with pytest.raises(InvalidArgumentError):
                await client.subscribe("no spaces allowed", [1]).start()

    trio.run(run)
    # Refusals are answers: no node went down over them.
    assert all(p.alive() for p in cluster.processes.values())


def test_members_go_on_when_the_coordinator_s_node_is_killed(
    cluster: LocalCluster, members: Callable[[str, str], Member]
) -> None:
    """Last in this module: it kills a node (and starts it again)."""
    group = "sub-failover"
    sent = _append(cluster, "p", 10)
    a = members(group, "a")
    _wait("all logs to the first member", lambda: a.assigned() == list(LOGS))
    b = members(group, "b")
    _wait("the logs split", lambda: len(a.assigned() or []) == 3 and len(b.assigned() or []) == 3)
    with logstrand.connect(cluster.url) as client:
        coordinator = client.sequencer_node(positions_log_of(group))
    assert coordinator is not None
    split = (a.assigned(), b.assigned())
    cluster.kill_node(coordinator)
    try:
        sent |= _append(cluster, "q", 10)
        _wait("every record, with the coordinator moved", lambda: set(_seen(a, b)) >= sent, 90)
        # The new coordinator read the group back: the same members keep
        # their logs (a rebalance would have shown up as new assignments).
        time.sleep(2 * SESSION_S)
        assert (a.assigned(), b.assigned()) == split
        with logstrand.connect(cluster.url) as client:
            assert client.sequencer_node(positions_log_of(group)) != coordinator
    finally:
        cluster.start_node(coordinator)

"""A cluster on separate network hosts (namespaces on this machine), set up
as docs/deploy.md tells an operator: ZooKeeper on its own host, a node per
host from its TOML file with TLS, listening on 0.0.0.0 and advertising its
host's address; clients and the CLI in the root namespace reach them by
those addresses.  Appends, reads, failover, trim and compaction across hosts."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from typing import TYPE_CHECKING

import pytest

import logstrand
from logstrand import Gap, GapType, Record
from logstrand.testing import zookeeper_available
from logstrand.testing._netcluster import METRICS_PORT, NetCluster
from logstrand.testing._netns import partitions_available

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [
    pytest.mark.skipif(
        partitions_available() is not None, reason=f"{partitions_available()} (hosts)"
    ),
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    with NetCluster(tmp_path_factory.mktemp("hosts"), nodes=3, tls=True) as c:
        c.cli("logs", "create", "1..4", "--replication", "2")
        c.cli("logs", "create", "5", "--replication", "2", "--compact")
        yield c


def records(items: list[Record | Gap]) -> list[Record]:
    return [i for i in items if isinstance(i, Record)]


def test_nodes_advertise_their_hosts_and_clients_reach_them(hosts: NetCluster) -> None:
    doc = json.loads(hosts.cli("status", "--json"))
    got = {n["node_id"]: (n["address"], n["state"]) for n in doc["nodes"]}
    assert got == {i: (hosts.address(i), "alive") for i in (1, 2, 3)}
    table = hosts.cli("status")
    for i in (1, 2, 3):
        assert hosts.address(i) in table  # whole, not cut to fit the terminal
    # Metrics on the host's address, scraped from another host.
    with urllib.request.urlopen(
        f"http://{hosts.net.address('n2')}:{METRICS_PORT}/metrics", timeout=5
    ) as resp:
        assert b"logstrand_" in resp.read()
    # The file and the command line, merged.
    cfg = hosts.directory / "n1" / "node.toml"
    out = hosts.cli("node", "--config", str(cfg), "--print-config", "--rebuild-settle", "2")
    assert f'advertise = "{hosts.address(1)}"' in out
    assert "rebuild_settle = 2.0" in out
    assert 'listen = "0.0.0.0:4440"' in out


def test_appends_reads_and_failover_across_hosts(hosts: NetCluster) -> None:
    with logstrand.connect(hosts.url, **hosts.client_options) as client:
        first = client.append_batch(1, [b"a%d" % i for i in range(500)])
        seq = json.loads(hosts.cli("info", "1", "--json"))["sequencer_node"]
        hosts.kill_node(seq)
        try:
            more = client.append_batch(1, [b"b%d" % i for i in range(500)])
            assert more[0] >> 32 > first[0] >> 32  # a new epoch, on another host
            got = records(list(client.read(1, first[0], more[-1])))
            assert [r.payload for r in got] == [b"a%d" % i for i in range(500)] + [
                b"b%d" % i for i in range(500)
            ]
        finally:
            hosts.start_node(seq)


def test_trim_and_compaction_across_hosts(hosts: NetCluster) -> None:
    with logstrand.connect(hosts.url, **hosts.client_options) as client:
        lsns = client.append_batch(2, [b"t%d" % i for i in range(100)])
        hosts.cli("trim", "2", "--to", str(lsns[49]))
        items = list(client.read(2, lsns[0], lsns[-1]))
        assert isinstance(items[0], Gap)
        assert items[0].type == GapType.TRIM
        assert [r.payload for r in records(items)] == [b"t%d" % i for i in range(50, 100)]
        for rnd in range(5):
            client.append_batch(5, [b"v%d" % rnd] * 20, keys=[b"k%d" % k for k in range(20)])
        hosts.cli("compact", "5")
        latest = {r.key: r.payload for r in records(list(client.read(5)))}
        assert latest == {b"k%d" % k: b"v4" for k in range(20)}
        assert len(records(list(client.read(5)))) == 20


def test_a_node_that_moves_advertises_its_new_address(hosts: NetCluster) -> None:
    """Node 3 comes back on another port (a new listen and advertise on the
    command line, over its file): its start rewrites the configuration, and
    clients and the other nodes follow it."""
    host = hosts.net.address("n3")
    moved = f"{host}:4441"
    hosts.stop_node(3)
    try:
        hosts.start_node(3, "--listen", "0.0.0.0:4441", "--advertise", moved, port=4441)
        nodes = json.loads(hosts.cli("status", "--json"))["nodes"]
        assert {n["node_id"]: (n["address"], n["state"]) for n in nodes}[3] == (moved, "alive")
        with logstrand.connect(hosts.url, **hosts.client_options) as client:
            written = {}
            for log in (3, 4):  # R=2 of 3 nodes: most batches need node 3
                written[log] = client.append_batch(log, [b"m%d" % i for i in range(200)])
            hosts.kill_node(1)  # what it held is read from its other holders, node 3 too
            try:
                for log, lsns in written.items():
                    got = records(list(client.read(log, lsns[0], lsns[-1])))
                    assert [r.payload for r in got] == [b"m%d" % i for i in range(200)]
            finally:
                hosts.start_node(1)
    finally:
        hosts.stop_node(3)
        hosts.start_node(3)  # back where its file says
    nodes = json.loads(hosts.cli("status", "--json"))["nodes"]
    assert {n["node_id"]: n["address"] for n in nodes}[3] == hosts.address(3)


def test_the_harness_removes_what_it_made_even_when_a_test_fails(tmp_path: Path) -> None:
    from logstrand.testing import Network

    def present() -> str:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return out + subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout

    made: list[str] = []
    procs = []

    def failing_test() -> None:
        with Network(tmp_path, ["a", "b"]) as net:
            procs.append(net.spawn("a", ["sleep", "600"]))
            net.partition(["a"], ["b"])
            made.extend([net.bridge, *(h.namespace for h in net.hosts.values())])
            made.extend(h.veth for h in net.hosts.values())
            assert all(name in present() for name in made)
            raise RuntimeError("planted")

    with pytest.raises(RuntimeError, match="planted"):
        failing_test()
    assert not procs[0].alive()  # stopped
    now = present()
    assert [name for name in made if name in now] == []

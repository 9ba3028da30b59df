"""Start a local cluster of real node processes on 127.0.0.1.

    with LocalCluster(tmp_dir, nodes=3) as cluster:
        with logstrand.connect(cluster.url) as client:
            ...
        cluster.kill_node(2)          # SIGKILL
        cluster.start_node(2)

Used by ``logstrand dev up``, the integration tests and the benchmarks.  Every
process it starts it also stops (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from ..epochstore import NodeConfig, open_epoch_store
from ..net import handshake_sync
from ._ports import free_port
from ._procs import Harness, Process

if TYPE_CHECKING:
    from ..epochstore import EpochStore


class LocalCluster(Harness):
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        nodes: int = 3,
        zookeeper: str | None = None,
        cluster: str = "dev",
        node_args: tuple[str, ...] = (),
        secure: bool = False,
        rebuild_grace_ms: int | None = None,
        clock_offsets: dict[int, int] | None = None,
        kafka: bool = False,
        console: bool = False,
    ) -> None:
        super().__init__()
        #: Each node serves the console and HTTP admin API (``--http-port``):
        #: ``console_urls`` lists them.
        self.console = console
        self.http_ports: dict[int, int] = {}
        #: Each node serves the Kafka protocol too (``--kafka-port``, topics
        #: created when asked for): ``kafka_bootstrap`` lists them.
        self.kafka = kafka
        self.kafka_ports: dict[int, int] = {}
        self.directory = Path(directory).absolute()
        #: TLS on every connection, node certificates, and an ``admin`` user
        #: whose token is in ``DIR/admin.token`` (docs/security.md).
        self.secure = secure
        self.ca_path: str | None = None
        self.admin_token: str | None = None
        self.node_count = nodes
        #: Self-initiated rebuilding after a node is dead this long (None: off).
        self.rebuild_grace_ms = rebuild_grace_ms
        self.node_args = node_args
        #: Node id -> milliseconds its wall clock is off (``testing._skew``).
        self.clock_offsets = dict(clock_offsets or {})
        if zookeeper:
            self.url = f"zk://{zookeeper}/{cluster}"
        else:
            self.url = f"sqlite://{self.directory / 'cluster.db'}"
        self.nodes: dict[int, NodeConfig] = {}
        self.cluster = cluster

    def configure(self) -> None:
        """Write the nodes configuration (fresh ports for nodes not serving now)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open_epoch_store(self.url, create=True) as store:
            self.cluster = store.cluster
            existing = store.nodes()
            ports = _fresh_ports(existing, 2 * self.node_count)
            for i in range(1, self.node_count + 1):
                cfg = NodeConfig(
                    i,
                    f"127.0.0.1:{ports[2 * i - 2]}",
                    location=f"local.dc1.rack{i}",
                    metrics_port=ports[2 * i - 1],
                    data_dir=str(self.directory / f"node{i}"),
                )
                if i in existing:
                    store.update_node(cfg)
                else:
                    store.add_node(cfg)
            self.nodes = store.nodes()
            if self.rebuild_grace_ms is not None:
                store.set_rebuild_grace(self.rebuild_grace_ms)
            if self.secure:
                self._secure(store)

    def _secure(self, store: EpochStore) -> None:
        """A CA and node certificates in ``DIR/tls``; an ``admin`` user with
        every permission, its token in ``DIR/admin.token`` (mode 0600)."""
        from ..records import LOG_ID_MAX
        from ..security import OPS, hash_token, new_token, scram_credentials
        from ..security._certs import LocalCA

        ca = LocalCA(str(self.directory / "tls"))
        self.ca_path = ca.ca_path
        for node_id, cfg in self.nodes.items():
            ca.node(node_id, [cfg.host, "localhost"])
        token_path = self.directory / "admin.token"
        users = store.security()["users"]
        if "admin" in users and token_path.exists():
            self.admin_token = token_path.read_text().strip()
            return
        if "admin" in users:
            store.remove_user("admin")
        token = new_token()
        store.add_user("admin", hash_token(token), scram_credentials(token))
        store.grant("admin", 1, LOG_ID_MAX, frozenset(OPS))
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        self.admin_token = token

    @property
    def client_options(self) -> dict[str, str]:
        """What ``logstrand.connect(cluster.url, **cluster.client_options)`` needs."""
        if not self.secure:
            return {}
        assert self.ca_path is not None
        assert self.admin_token is not None
        return {"ca": self.ca_path, "token": self.admin_token}

    def client_env(self) -> dict[str, str]:
        """The same for the CLI and Spark, as environment variables."""
        opts = self.client_options
        env = {"LOGSTRAND_URL": self.url}
        if opts:
            env["LOGSTRAND_CA"] = opts["ca"]
            env["LOGSTRAND_TOKEN"] = opts["token"]
        return env

    def start(self, timeout_s: float = 60.0) -> None:
        self.configure()
        for i in range(1, self.node_count + 1):
            self._spawn(i)
        for i in range(1, self.node_count + 1):
            self.wait_ready(i, timeout_s)

    def _spawn(self, node_id: int) -> None:
        logs = self.directory / "logs"
        logs.mkdir(exist_ok=True)
        offset = self.clock_offsets.get(node_id)
        launcher = ["logstrand"] if offset is None else ["logstrand.testing._skew", str(offset)]
        argv = [sys.executable, "-m", *launcher, "node", "--url", self.url, "--id", str(node_id)]
        argv += [*self._tls_args(node_id), *self.node_args]
        if self.kafka:
            argv += ["--kafka-port", str(self._port(self.kafka_ports, node_id))]
            argv += ["--kafka-auto-create"]
        if self.console:
            argv += ["--http-port", str(self._port(self.http_ports, node_id))]
        self.processes[node_id] = Process(argv, logs / f"node{node_id}.log")

    def _port(self, ports: dict[int, int], node_id: int) -> int:
        """A free port for ``node_id`` kept in ``ports``, the same on restarts."""
        if node_id not in ports:
            taken = {n.port for n in self.nodes.values()} | {
                n.metrics_port for n in self.nodes.values()
            }
            taken |= set(self.kafka_ports.values()) | set(self.http_ports.values())
            ports[node_id] = next(p for p in iter(free_port, 0) if p not in taken)
        return ports[node_id]

    @property
    def console_urls(self) -> dict[int, str]:
        """Each node's console (``console=True``): ``http://127.0.0.1:PORT``
        (``https`` in secure mode, with the node's certificate)."""
        scheme = "https" if self.secure else "http"
        return {n: f"{scheme}://127.0.0.1:{p}" for n, p in sorted(self.http_ports.items())}

    @property
    def kafka_bootstrap(self) -> str:
        """``host:port,...`` of the nodes' Kafka fronts (``kafka=True``)."""
        return ",".join(f"127.0.0.1:{p}" for _, p in sorted(self.kafka_ports.items()))

    def _tls_args(self, node_id: int) -> list[str]:
        if not self.secure:
            return []
        tls = self.directory / "tls"
        return [
            "--tls-cert",
            str(tls / f"node{node_id}.pem"),
            "--tls-key",
            str(tls / f"node{node_id}.key"),
            "--tls-ca",
            str(tls / "ca.pem"),
        ]

    def wait_ready(self, node_id: int, timeout_s: float = 60.0) -> None:
        cfg = self.nodes[node_id]
        ctx = None
        if self.secure:
            from ..security import client_context

            assert self.ca_path is not None
            ctx = client_context(self.ca_path)

        def serving() -> bool:
            return handshake_sync(
                cfg.host,
                cfg.port,
                self.cluster,
                timeout_s=1.0,
                ssl_context=ctx,
                token=self.admin_token,
            )

        self.processes[node_id].wait_until(serving, timeout_s, f"node {node_id}")

    def add_node(
        self, timeout_s: float = 60.0, *, roles: tuple[str, ...] = ("storage", "sequencer")
    ) -> int:
        """Add a node to the running cluster (the next id, fresh ports, its
        own rack) and start it; its id.  Not for a ``secure`` cluster (its
        certificates are made for the first nodes only)."""
        if self.secure:
            raise ValueError("add_node: a secure test cluster has no certificate for a new node")
        with open_epoch_store(self.url) as store:
            existing = store.nodes()
            node_id = max(existing, default=0) + 1
            ports = _fresh_ports(existing, 2)
            store.add_node(
                NodeConfig(
                    node_id,
                    f"127.0.0.1:{ports[0]}",
                    location=f"local.dc1.rack{node_id}",
                    metrics_port=ports[1],
                    data_dir=str(self.directory / f"node{node_id}"),
                    roles=roles,
                )
            )
            self.nodes = store.nodes()
        self.node_count = max(self.node_count, node_id)
        self._spawn(node_id)
        self.wait_ready(node_id, timeout_s)
        return node_id

    def metric(self, node_id: int, name: str, default: float | None = None) -> float:
        """The value of a metric on the node's Prometheus page: ``name`` as
        the page prints it, labels included (``x_count{generation="2"}``).
        ``default`` when the page has none (else LookupError)."""
        port = self.nodes[node_id].metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.rsplit(" ", 1)[1])
        if default is not None:
            return default
        raise LookupError(f"node {node_id} has no metric {name}")

    def start_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped node again (same address, same data)."""
        if self.alive(node_id):
            return
        self._spawn(node_id)
        self.wait_ready(node_id, timeout_s)

    def wipe_node(self, node_id: int) -> None:
        """Delete the node's data directory (a lost disk); stop the node first."""
        import shutil

        shutil.rmtree(self.nodes[node_id].data_dir, ignore_errors=True)

    def sequencer_of(self, log_id: int, epoch: int) -> int:
        """The node that activated ``log_id``'s sequencer in ``epoch`` (from its log).

        Clients and nodes may briefly disagree on routing; the node that took
        the epoch is the one that holds the sequencer.
        """
        needle = f"sequencer for log {log_id} active in epoch {epoch}\n"
        for node_id in self.nodes:
            path = self.directory / "logs" / f"node{node_id}.log"
            if path.exists() and needle in path.read_text(errors="replace"):
                return node_id
        raise LookupError(f"no node activated log {log_id} in epoch {epoch}")

    def __enter__(self) -> LocalCluster:
        super().__enter__()
        return self


def _fresh_ports(existing: dict[int, NodeConfig], count: int) -> list[int]:
    """``count`` free ports, none used twice (the kernel may hand a just-freed
    port out again) and none in the configuration ``existing``."""
    taken = {n.port for n in existing.values()}
    taken |= {n.metrics_port for n in existing.values() if n.metrics_port}
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return ports

"""A cluster across separate hosts of a ``Network`` (namespaces on one
machine), set up with the steps of docs/deploy.md: ZooKeeper on host ``zk``,
one node per host ``n1``..``nN``, each started from its own TOML file, the
operator's commands (``logstrand nodes add``, ``logs create``, ``users``,
``acl``, ``tls``) run from the root namespace as from an admin machine.

    with NetCluster(tmp_dir, nodes=3, tls=True) as c:
        with logstrand.connect(c.url, **c.client_options) as client: ...
        c.kill_node(2); c.net.partition(["n1"], ["n2", "n3"]); c.net.heal()
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ._netns import Network
from ._procs import Harness
from ._zookeeper import ZooKeeperServer

if TYPE_CHECKING:
    from collections.abc import Sequence

NODE_PORT = 4440
METRICS_PORT = 9100
ZK_PORT = 2181
#: The delaying proxy of link (a, b) listens on b's host at this + a.
PROXY_PORT = 15000


class NetCluster(Harness):
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        nodes: int = 3,
        tls: bool = False,
        cluster: str = "prod",
        extra_hosts: Sequence[str] = (),
        slow_links: Sequence[tuple[int, int]] = (),
    ) -> None:
        super().__init__()
        self.directory = Path(directory).absolute()
        self.node_count = nodes
        self.tls = tls
        self.cluster = cluster
        self.net = Network(self.directory / "net", ["zk", *self.hosts(), *extra_hosts])
        self.zk: ZooKeeperServer | None = None
        self.token: str | None = None
        self.url = ""
        #: (a, b): node a's connections to node b go through a delaying proxy
        #: on b's host (``slow``).
        self.slow_links = tuple(slow_links)

    def hosts(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.node_count + 1)]

    def address(self, node_id: int) -> str:
        return f"{self.net.address(f'n{node_id}')}:{NODE_PORT}"

    @property
    def ca_path(self) -> str:
        return str(self.directory / "tls" / "ca.pem")

    @property
    def client_options(self) -> dict[str, str]:
        if not self.tls:
            return {}
        assert self.token is not None
        return {"ca": self.ca_path, "token": self.token}

    def client_env(self) -> dict[str, str]:
        env = {**os.environ, "LOGSTRAND_URL": self.url}
        if self.tls and self.token is not None:
            env |= {"LOGSTRAND_CA": self.ca_path, "LOGSTRAND_TOKEN": self.token}
        return env

    # -- the deploy steps ------------------------------------------------------

    def __enter__(self) -> NetCluster:
        super().__enter__()
        return self

    def start(self) -> None:
        self.net.open()
        ns = self.net.hosts["zk"].namespace
        self.zk = ZooKeeperServer(
            self.directory / "zk",
            host=self.net.address("zk"),
            port=ZK_PORT,
            launcher=("ip", "netns", "exec", ns),
        )
        self.zk.start()
        self.url = f"zk://{self.zk.address}/{self.cluster}"
        tls_dir = self.directory / "tls"
        for i in range(1, self.node_count + 1):
            host = self.net.address(f"n{i}")
            if self.tls:
                self.cli("tls", "node", str(tls_dir), "--id", str(i), "--host", host)
            self.cli(
                "nodes", "add", "--id", str(i), "--address", self.address(i),
                "--location", f"region1.dc1.rack{i}",
            )  # fmt: skip
            self.write_config(i)
        for a, b in self.slow_links:
            self._proxy(a, b)
        if self.tls:
            out = self.cli("users", "add", "admin")
            self.token = out.split()[-1]
            self.cli("acl", "grant", "admin", "--logs", "all", "--ops", "all")
        for i in range(1, self.node_count + 1):
            self.start_node(i, wait=False)
        for i in range(1, self.node_count + 1):
            self.wait_ready(i)

    def write_config(self, node_id: int) -> Path:
        """The node's file, as docs/deploy.md writes it."""
        host = self.net.address(f"n{node_id}")
        data = self.directory / f"n{node_id}"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            f"id = {node_id}",
            f'url = "{self.url}"',
            f'data_dir = "{data / "data"}"',
            f'listen = "0.0.0.0:{NODE_PORT}"',
            f'advertise = "{host}:{NODE_PORT}"',
            f'metrics = "{host}:{METRICS_PORT}"',
        ]
        if self.tls:
            tls = self.directory / "tls"
            lines += [
                f'tls_cert = "{tls / f"node{node_id}.pem"}"',
                f'tls_key = "{tls / f"node{node_id}.key"}"',
                f'tls_ca = "{tls / "ca.pem"}"',
            ]
        path = data / "node.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def cli(self, *args: str, check: bool = True) -> str:
        """``logstrand ARGS`` from the root namespace (the operator's machine)."""
        env = self.client_env()
        if not self.url:
            env.pop("LOGSTRAND_URL", None)
        proc = subprocess.run(
            [sys.executable, "-m", "logstrand", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"logstrand {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc.stdout

    # -- slow links ----------------------------------------------------------------

    def _proxy(self, a: int, b: int) -> None:
        """On b's host, a proxy takes a's connections to b's port (a REDIRECT
        rule for packets from a's address) and forwards them to b's node
        after the delay of ``slow``.  Partition rules still see a's address."""
        port = PROXY_PORT + a
        control = self._delay_file(a, b)
        control.write_text("0")
        argv = [sys.executable, "-m", "logstrand.testing._delay_proxy",
                "--listen", f"0.0.0.0:{port}", "--to", f"127.0.0.1:{NODE_PORT}",
                "--control", str(control)]  # fmt: skip
        self.net.spawn(f"n{b}", argv, self.directory / f"proxy-{a}-{b}.log")
        self.net.run(
            f"n{b}",
            ["iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-s", self.net.address(f"n{a}"),
             "-p", "tcp", "--dport", str(NODE_PORT), "-j", "REDIRECT", "--to-ports", str(port)],
        )  # fmt: skip

    def _delay_file(self, a: int, b: int) -> Path:
        return self.directory / f"delay-{a}-{b}"

    def slow(self, a: int, b: int, delay_ms: float) -> None:
        """Delay everything on a's connections to b (both ways) by ``delay_ms``."""
        if (a, b) not in self.slow_links:
            raise ValueError(f"no proxy on the link {a} -> {b}: pass slow_links")
        self._delay_file(a, b).write_text(str(delay_ms))

    # -- nodes -------------------------------------------------------------------

    def start_node(
        self, node_id: int, *args: str, wait: bool = True, port: int = NODE_PORT
    ) -> None:
        """Start a node from its file; ``args`` go after it on the command line
        (and win over it); ``port``: where it will listen."""
        data = self.directory / f"n{node_id}"
        argv = [sys.executable, "-m", "logstrand", "node", "--config", str(data / "node.toml")]
        log = data / "node.log"
        self.processes[node_id] = self.net.spawn(f"n{node_id}", [*argv, *args], log)
        if wait:
            self.wait_ready(node_id, port=port)

    def wait_ready(self, node_id: int, timeout_s: float = 60.0, port: int = NODE_PORT) -> None:
        host = self.net.address(f"n{node_id}")

        def serving() -> bool:
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return True
            except OSError:
                return False

        self.processes[node_id].wait_until(serving, timeout_s, f"node {node_id}")

    def stop(self) -> None:
        super().stop()
        if self.zk is not None:
            self.zk.stop()
            self.zk = None
        self.net.close()

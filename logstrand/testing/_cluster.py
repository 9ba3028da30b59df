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

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..epochstore import NodeConfig, open_epoch_store
from ..net import handshake_sync
from ._zookeeper import free_port

if TYPE_CHECKING:
    from ..epochstore import EpochStore


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the process that started us dies, so that
    a killed test run or launcher never leaves nodes behind (Linux only)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class LocalCluster:
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
    ) -> None:
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
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._logs: dict[int, IO[bytes]] = {}
        self.nodes: dict[int, NodeConfig] = {}
        self.cluster = cluster

    def configure(self) -> None:
        """Write the nodes configuration (fresh ports for nodes not serving now)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open_epoch_store(self.url) as store:
            self.cluster = store.cluster
            existing = store.nodes()
            # Fresh ports, none used twice (the kernel may hand a just-freed
            # port out again) and none still in the old configuration.
            taken = {n.port for n in existing.values()}
            taken |= {n.metrics_port for n in existing.values() if n.metrics_port}
            ports: list[int] = []
            while len(ports) < 2 * self.node_count:
                port = free_port()
                if port not in taken:
                    taken.add(port)
                    ports.append(port)
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
        from ..security import OPS, hash_token, new_token
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
        store.add_user("admin", hash_token(token))
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
        out = open(logs / f"node{node_id}.log", "ab")  # noqa: SIM115 - closed in _reap
        self._logs[node_id] = out
        offset = self.clock_offsets.get(node_id)
        launcher = ["logstrand"] if offset is None else ["logstrand.testing._skew", str(offset)]
        self.procs[node_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                *launcher,
                "node",
                "--url",
                self.url,
                "--id",
                str(node_id),
                *self._tls_args(node_id),
                *self.node_args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )

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
        deadline = time.monotonic() + timeout_s
        proc = self.procs[node_id]
        ctx = None
        if self.secure:
            from ..security import client_context

            assert self.ca_path is not None
            ctx = client_context(self.ca_path)
        while not handshake_sync(
            cfg.host, cfg.port, self.cluster, timeout_s=1.0, ssl_context=ctx, token=self.admin_token
        ):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"node {node_id} exited with {proc.returncode}; "
                    f"see {self.directory / 'logs' / f'node{node_id}.log'}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node_id} did not start within {timeout_s} s")
            time.sleep(0.05)

    def start_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped node again (same address, same data)."""
        if node_id in self.procs and self.procs[node_id].poll() is None:
            return
        self._spawn(node_id)
        self.wait_ready(node_id, timeout_s)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL: no goodbye, no flush; membership lapses with the lease or session."""
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        self._reap(node_id)

    def wipe_node(self, node_id: int) -> None:
        """Delete the node's data directory (a lost disk); stop the node first."""
        import shutil

        shutil.rmtree(self.nodes[node_id].data_dir, ignore_errors=True)

    def pause_node(self, node_id: int) -> None:
        """SIGSTOP: the process stays, silent, with its state; ``resume_node`` goes on."""
        self.procs[node_id].send_signal(signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        self.procs[node_id].send_signal(signal.SIGCONT)

    def stop_node(self, node_id: int, timeout_s: float = 20.0) -> None:
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused node could not act on SIGTERM
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        self._reap(node_id)

    def _reap(self, node_id: int) -> None:
        self.procs.pop(node_id, None)
        out = self._logs.pop(node_id, None)
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()

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

    def alive(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for node_id in list(self.procs):
            self.stop_node(node_id)

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

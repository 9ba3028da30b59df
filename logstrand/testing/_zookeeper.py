"""Start a real ZooKeeper server (the Debian package) for tests and local runs.

    with ZooKeeperServer(tmp_dir) as zk:
        url = f"zk://{zk.address}/mycluster"

The server binds to 127.0.0.1 on a free port, keeps its data in the given
directory, and is stopped (and waited for) on exit.  ``stop()`` and
``start()`` may be called again to take it away from running clients and give
it back on the same port and data.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ._ports import free_port
from ._procs import Process

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def zookeeper_available() -> bool:
    """True when the Debian zookeeper package and a java runtime are installed."""
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def _ruok(port: int, host: str = "127.0.0.1") -> bool:
    """True once the server serves clients: ``srvr`` reports its mode.

    (``ruok`` answers ``imok`` as soon as the process runs, before it takes
    sessions; a client connecting then can time out.)
    """
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
            return b"Mode: " in reply
    except OSError:
        return False


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1 (or on ``host``, started with
    ``launcher`` before its command: another network namespace's address
    and ``ip netns exec NS``, see ``_netns``)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        tick_ms: int = 200,
        host: str = "127.0.0.1",
        port: int | None = None,
        launcher: Sequence[str] = (),
    ) -> None:
        if not zookeeper_available():
            raise RuntimeError(
                "ZooKeeper is not installed: install the Debian package 'zookeeper' "
                "(make test does this when run as root)"
            )
        self.directory = Path(directory)
        self.host = host
        self.port = port or free_port()
        self.launcher = tuple(launcher)
        self.tick_ms = tick_ms
        self._proc: Process | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> Path:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        # Sessions may last 2 to 20 ticks: with 200 ms ticks a dead client's
        # ephemeral nodes go within 4 s, which keeps membership tests short.
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_ms}",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr",
                    "maxClientCnxns=200",
                    "",
                ]
            )
        )
        return cfg

    def start(self, timeout_s: float = 30.0) -> None:
        if self._proc is not None:
            return
        cfg = self._write_config()
        argv = [*self.launcher, "java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
                "-Djava.net.preferIPv4Stack=true", "-cp", str(ZOOKEEPER_JAR), MAIN_CLASS,
                str(cfg)]  # fmt: skip
        self._proc = Process(argv, self.directory / "zookeeper.out", tied=False)
        try:
            self._proc.wait_until(lambda: _ruok(self.port, self.host), timeout_s, "ZooKeeper")
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.stop(10.0)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

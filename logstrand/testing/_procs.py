"""The processes a harness starts: how each is started, waited for and
stopped, and what it costs (from /proc).  ``LocalCluster``, ``NetCluster``,
``Network`` and ``ZooKeeperServer`` all start theirs here, so every one of
them is stopped the same way: SIGCONT (a paused process cannot act on what
follows), SIGTERM, and SIGKILL after a grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the process that started it dies, so
    that a killed test run or launcher never leaves processes behind."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Process:
    """One started process and the file its output goes to."""

    def __init__(
        self,
        argv: Sequence[str],
        log: Path | None,
        *,
        env: dict[str, str] | None = None,
        tied: bool = True,
    ) -> None:
        self.log: IO[bytes] | None = open(log, "ab") if log is not None else None  # noqa: SIM115
        self.log_path = log
        self.popen = subprocess.Popen(
            list(argv),
            stdout=self.log if self.log is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_die_with_parent if tied else None,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)

    def stop(self, timeout_s: float = 45.0, *, kill: bool = False) -> int:
        """SIGTERM (SIGKILL with ``kill`` or after ``timeout_s``), wait, and
        close the log; the exit code."""
        if kill:
            self.signal(signal.SIGKILL)
        else:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait(timeout=30)
        if self.log is not None:
            with contextlib.suppress(OSError):
                self.log.close()
        return self.popen.returncode

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll ``ready`` until it holds; raise when the process exits first
        or ``timeout_s`` passes (naming ``what`` and the log)."""
        deadline = time.monotonic() + timeout_s
        where = f"; see {self.log_path}" if self.log_path is not None else ""
        while not ready():
            if not self.alive():
                raise RuntimeError(f"{what} exited with {self.popen.returncode}{where}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} was not ready within {timeout_s} s{where}")
            time.sleep(0.05)


class Harness:
    """What the test clusters share: their node processes by id, and the
    context manager that stops everything they started, even when starting
    failed half way."""

    def __init__(self) -> None:
        self.processes: dict[int, Process] = {}

    @property
    def procs(self) -> dict[int, subprocess.Popen[bytes]]:
        """The node processes running (or exited but not yet reaped), by id."""
        return {n: p.popen for n, p in self.processes.items()}

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop every node (all signalled first, then each waited for)."""
        for proc in self.processes.values():
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGTERM)
        for node_id in list(self.processes):
            self.stop_node(node_id)

    def stop_node(self, node_id: int, timeout_s: float = 45.0) -> None:
        proc = self.processes.pop(node_id, None)
        if proc is not None:
            proc.stop(timeout_s)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL: no goodbye, no flush."""
        proc = self.processes.pop(node_id, None)
        if proc is not None:
            proc.stop(kill=True)

    def pause_node(self, node_id: int) -> None:
        """SIGSTOP: the process stays, silent, with its state; ``resume_node`` goes on."""
        self.processes[node_id].signal(signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        self.processes[node_id].signal(signal.SIGCONT)

    def alive(self, node_id: int) -> bool:
        proc = self.processes.get(node_id)
        return proc is not None and proc.alive()

    def __enter__(self) -> Harness:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cpu_s(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes used so far (gone ones count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def rss_mb(pid: int) -> float:
    """Resident memory of a process now, in MiB (0 when it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0

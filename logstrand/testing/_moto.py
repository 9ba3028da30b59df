"""A real S3 API on this machine for tests and ``dev up --tier``: moto's
server mode (``moto[server]``), one process on 127.0.0.1 and a free port.

moto keeps objects in the server's memory and checks no signatures, so any
credentials do; what the tiered storage sends it is still every request a
real object store gets (PUT, ranged GET, DELETE, LIST), over HTTP.
"""

from __future__ import annotations

import contextlib
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from ._ports import free_port
from ._procs import Process

if TYPE_CHECKING:
    import os

#: What moto is told the credentials are (it checks none); the tiered
#: storage's clients send them as any S3 client would.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def moto_available() -> bool:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


class MotoServer:
    """moto's S3 server on 127.0.0.1 (``endpoint``), until ``stop``."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = None if directory is None else Path(directory) / "moto.out"
        self._proc: Process | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        if self._proc is not None:
            return
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self._proc = Process(argv, self._log)
        try:
            self._proc.wait_until(self._up, timeout_s, "moto")
        except RuntimeError:
            self.stop()
            raise

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1.0):
                return True
        except (OSError, urllib.error.URLError):
            return False

    def create_bucket(self, bucket: str) -> None:
        """Make ``bucket`` (moto takes an unsigned PUT)."""
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10.0):
            pass

    @property
    def pid(self) -> int | None:
        """The server's process id (None: not running): for CPU accounting."""
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stop(10.0)

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

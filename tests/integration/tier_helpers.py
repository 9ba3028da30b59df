"""What the tiered storage's integration tests share: the wait, the CLI,
the credentials file moto is given, and the records of a read."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import TYPE_CHECKING

from logstrand.testing._moto import CREDENTIALS
from logstrand.types import Gap, Record

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from logstrand.testing import LocalCluster


def wait(what: str, done: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.2)


def cli(c: LocalCluster, *args: str) -> str:
    """``logstrand ARGS --url`` the cluster's; its output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "logstrand", *args, "--url", c.url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def credentials_file(directory: Path) -> Path:
    """A ``--tier-credentials`` file with what moto is told."""
    path = directory / "creds"
    path.write_text("".join(f"{k}={v}\n" for k, v in CREDENTIALS.items()))
    return path


def records(items: list[Record | Gap]) -> list[Record]:
    return [i for i in items if isinstance(i, Record)]

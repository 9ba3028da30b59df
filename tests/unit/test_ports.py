"""``logstrand.testing.free_port``: ports below the kernel's ephemeral range,
where no outgoing connection takes one between the pick and the bind (a
node of one test worker exited with "Address already in use" in CI), and
disjoint between test workers."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

from logstrand.testing import free_port
from logstrand.testing._ports import _ephemeral_low

if TYPE_CHECKING:
    import pytest


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(200)]
    assert all(1024 < p < _ephemeral_low() for p in ports), ports[:5]
    assert len(set(ports)) == 200  # handed out in turn
    for p in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_skipped() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        taken = held.getsockname()[1]
        assert taken not in {free_port() for _ in range(500)}


def test_test_workers_pick_from_disjoint_slices() -> None:
    code = "from logstrand.testing import _ports; print(_ports._ports.start, _ports._ports.stop)"
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        env = {**os.environ, "PYTEST_XDIST_WORKER": worker}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        lo, hi = map(int, out.stdout.split())
        slices.append(range(lo, hi))
    for i, a in enumerate(slices):
        assert len(a) >= 64
        for b in slices[i + 1 :]:
            assert not set(a) & set(b)


def test_a_port_browsers_refuse_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chromium refuses 10080 (ERR_UNSAFE_PORT): a console there failed a
    browser test in make test.  With the slice around it, every pick skips it."""
    from logstrand.testing import _ports

    monkeypatch.setattr(_ports, "_ports", range(10079, 10082))
    monkeypatch.setattr(_ports, "_next", itertools.count(1))  # 10080 comes first
    picked = {_ports.free_port() for _ in range(6)}
    assert 10080 not in picked
    assert picked <= {10079, 10081}

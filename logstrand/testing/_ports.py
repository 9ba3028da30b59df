"""Free TCP ports for servers that tests and local runs start.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the
ephemeral range, the same range every outgoing connection on the machine
takes its local port from.  Between the moment such a port is picked and the
moment the node started on it binds it, a connection of another test worker
may take it: the node then exits with "Address already in use" (it did, in
CI).  So ports come from below the ephemeral range, where the kernel hands
nothing out on its own, each test worker from its own slice, picked in turn
from a random start and checked free by binding it.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

#: The ports below the kernel's ephemeral range that are handed out.
LOW = 10_000
#: Slices of that range: one per test worker (``PYTEST_XDIST_WORKER``).
SLICES = 16
#: Ports browsers refuse to open (Chromium's and Firefox's restricted ports
#: at or above ``LOW``): a console on one fails a browser test with
#: ERR_UNSAFE_PORT (it did, in make test).
BROWSER_UNSAFE = frozenset({10080})


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> range:
    high = max(LOW + SLICES * 64, _ephemeral_low())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None
    if index is None:
        index = os.getpid()  # not a test worker: a slice by process
    width = (high - LOW) // SLICES
    start = LOW + (index % SLICES) * width
    return range(start, start + width)


_ports = _slice()
_next = itertools.count(random.randrange(len(_ports)))


def free_port() -> int:
    """A port on 127.0.0.1 that nothing is bound to now, from this process's
    slice below the ephemeral range (the kernel's pick when there is none)."""
    for _ in range(len(_ports)):
        port = _ports[next(_next) % len(_ports)]
        if port in BROWSER_UNSAFE:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen

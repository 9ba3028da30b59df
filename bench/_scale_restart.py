"""``bench/scale.py``'s restart phase: a node with a third of the active
sequencers restarts, and every log takes one more record.

Node 1 is stopped (``how``: ``stop`` sends SIGTERM, so that it hands its
logs off first, docs/recovery.md; ``kill`` sends SIGKILL, a crash), started
again, and at once one ``append_async`` goes to every log (the client's
own window per node, a 60 s append timeout).  Reports the seconds the stop
took, the epochs the node ended on its way out (from its log), the seconds
until every append ended after the restart, the appends that failed, and
how many epochs were recovered record by record meanwhile (the nodes'
"recovered" log lines: a hand-off leaves none to do).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import logstrand

if TYPE_CHECKING:
    from logstrand.testing import LocalCluster

PAYLOAD = b"x" * 100
_ENDED = re.compile(r"node 1: ended (\d+) of (\d+) sequencers' epochs")
_RECOVERED = re.compile(r"log \d+ epoch \d+ recovered")


def _log(c: LocalCluster, node_id: int) -> str:
    return (c.directory / "logs" / f"node{node_id}.log").read_text()


def restart(c: LocalCluster, n: int, how: str) -> dict[str, Any]:
    before = sum(len(_RECOVERED.findall(_log(c, i))) for i in c.nodes)
    t0 = time.perf_counter()
    if how == "stop":
        c.stop_node(1, 120.0)
    else:
        c.kill_node(1)
    out: dict[str, Any] = {"stop_s": time.perf_counter() - t0}
    ended = _ENDED.findall(_log(c, 1))
    out["ended"], out["sequencers"] = (int(x) for x in ended[-1]) if ended else (0, 0)
    c.start_node(1)
    settings = logstrand.ClientSettings(append_timeout_s=60.0)
    with logstrand.connect(c.url, settings=settings) as client:
        t0 = time.perf_counter()
        futures = [client.append_async(log, PAYLOAD) for log in range(1, n + 1)]
        client.flush(600)
        out["after_s"] = time.perf_counter() - t0
        out["errors"] = sum(1 for f in futures if f.exception() is not None)
    out["recovered"] = sum(len(_RECOVERED.findall(_log(c, i))) for i in c.nodes) - before
    return out

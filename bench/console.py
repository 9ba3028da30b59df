"""The console's aims (issue 39): the status API and the overview page with
10,000 logs, the log list over 100,000, the live tail at 1,000 appends/s.

    python bench/console.py [--logs 10000] [--repeat 5] [--json PATH]

A local 3-node cluster serving the console (R=2).  ``--logs`` logs get one
record each (so every node sequences about a third of them), in a
configuration of 100,000 logs.  Then, medians of ``--repeat``:

- ``GET /api/status``, one request after another;
- the overview in Debian's chromium: navigation until the three node cards
  are drawn (the page fetches /api/status, then draws);
- ``GET /api/logs`` of the last page of the 100,000;
- the live tail at 1,000 appends/s for 5 s (one client appending at a fixed
  pace): per record, from its append's acknowledgement to its event at the
  reader; how many records the events carried and how many they left out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster

TAIL_LOG = 1


def _ms(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        body: bytes = r.read()
        return body


def _fill(url: str, logs: int) -> None:
    with open_epoch_store(url) as store:
        store.create_logs(1, logs, LogAttributes(replication_factor=2))
        store.create_logs(logs + 1, 100_000, LogAttributes(replication_factor=2), name="rest")
    with logstrand.connect(url) as client:
        futures = [client.append_async(log, b"first") for log in range(1, logs + 1)]
        for f in futures:
            f.result(timeout=300)


def _page_loads(base: str, repeat: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=["--no-sandbox"]
        )
        page = browser.new_page()
        page.goto(base + "/")  # the browser's cache warm, as for a user coming back
        page.wait_for_selector("#nodes .card >> nth=2")
        for _ in range(repeat):
            page.goto("about:blank")
            t0 = time.perf_counter()
            page.goto(base + "/")
            page.wait_for_selector("#nodes .card >> nth=2")
            out.append((time.perf_counter() - t0) * 1000)
        browser.close()
    return out


def _tail(base: str, url: str, seconds: float, rate: int) -> dict[str, Any]:
    """Append at ``rate``/s for ``seconds`` while reading the tail's events."""
    host, port = base.removeprefix("http://").split(":")
    acked: dict[int, float] = {}
    seen: dict[int, float] = {}
    totals = {"arrived": 0, "skipped": 0, "events": 0}
    ready = threading.Event()
    done = threading.Event()

    def read() -> None:
        with socket.create_connection((host, int(port))) as s:
            s.sendall(f"GET /api/logs/{TAIL_LOG}/tail HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            s.settimeout(0.5)
            buf = b""
            while not done.is_set():
                try:
                    chunk = s.recv(1 << 16)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                now = time.monotonic()
                buf += chunk
                while b"\n\n" in buf:
                    frame, buf = buf.split(b"\n\n", 1)
                    if not frame.startswith(b"data: ") and b"data: " not in frame:
                        continue
                    event = json.loads(frame.split(b"data: ", 1)[1])
                    if event["type"] == "start":
                        ready.set()
                    if event["type"] == "records":
                        totals["events"] += 1
                        totals["arrived"] += event["arrived"]
                        totals["skipped"] += event["skipped"]
                        for r in event["records"]:
                            seen.setdefault(r["lsn"], now)

    reader = threading.Thread(target=read)
    reader.start()
    ready.wait(10)
    with logstrand.connect(url) as client:
        t0 = time.monotonic()
        n = int(seconds * rate)
        for i in range(n):
            f = client.append_async(TAIL_LOG, b"tail %d" % i)
            f.add_done_callback(lambda f: acked.__setitem__(f.result(), time.monotonic()))
            pause = t0 + (i + 1) / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        client.flush(30)
    time.sleep(1.5)
    done.set()
    reader.join()
    delays = sorted((seen[lsn] - t) * 1000 for lsn, t in acked.items() if lsn in seen)
    return {
        "appended": len(acked),
        "arrived": totals["arrived"],
        "shown": len(seen),
        "skipped": totals["skipped"],
        "events": totals["events"],
        "delay_ms_p50": statistics.median(delays) if delays else None,
        "delay_ms_p99": delays[int(len(delays) * 0.99)] if delays else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--logs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-console-") as tmp,
        LocalCluster(Path(tmp) / "c", nodes=3, console=True) as c,
    ):
        t0 = time.perf_counter()
        _fill(c.url, args.logs)
        print(f"{args.logs:,} logs with a record each: {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)  # fmt: skip
        base = c.console_urls[1]
        _get(base + "/api/status")
        status = [_ms(lambda: _get(base + "/api/status")) for _ in range(args.repeat * 4)]
        last = [
            _ms(lambda: _get(base + "/api/logs?offset=99900&limit=100")) for _ in range(args.repeat)
        ]
        sequencing = sum(
            len(n["sequencing"]) for n in json.loads(_get(base + "/api/status"))["nodes"]
        )
        page = _page_loads(base, args.repeat)
        tail = _tail(base, c.url, 5.0, 1000)
    result = {
        "logs": args.logs,
        "sequencing": sequencing,
        "status_ms": statistics.median(status),
        "status_runs": status,
        "overview_ms": statistics.median(page),
        "overview_runs": page,
        "last_page_of_100000_ms": statistics.median(last),
        "tail_1000_per_s": tail,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

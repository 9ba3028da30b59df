"""logstrand side by side with NATS JetStream and Redis Streams, same workload, one run.

    python bench/compare.py [--scale 1] [--repeat 3] [--json bench/results/compare.json]
    make bench-compare

The workload is the one ``../shared/bench/peers.py`` runs (every count times
``--scale``):

- append: 200,000 x 100 B and 20,000 x 10 KiB records, in windows of 1,000
  (logstrand: ``append_batch`` of 1,000, one window in flight, as the peers'
  pipelines of 1,000);
- latency: 5,000 sequential acknowledged appends of 100 B, p50/p99;
- backfill: each append stream read back from the start (logstrand three
  ways: numpy columns as ``read_columns`` builds them, the lazy column views of
  ``ReadStream.batches()``, and the one-``Record``-per-item iterator), with
  the nodes' CPU seconds per million records served and their peak RSS;
- delivery (R=2 only): 100,000 x 100 B appended with idempotence on and
  again off, and log 1 read with a consumer group and autocommit and again
  without, each pair in two turns (the better turn of each kept);
- tail: 2,000 x 100 B appended by one process at ``--tail-rate`` records/s,
  each acknowledged before the next, while another process follows the log;
  send -> delivery and append-ack -> delivery, p50/p99.

logstrand runs on a local cluster of 3 node processes (SQLite epoch store),
with R=2 and again with R=1 (the like-for-like row: the peers keep one copy),
with R=2 once more on JSON-like payloads in a log without compression and in
one with zstd (the bytes the nodes store, and backfill as numpy columns, which
decompresses every payload), and with R=2 once more with TLS on every
connection and a token (``--tls``; docs/security.md): its table gives the
ratio to the same run without TLS.
Then, in the same invocation, ``peers.py`` runs the peers (it starts and stops
its own servers; ``nats-server`` and ``redis-server`` are installed from Debian
when missing and we are root, the Python clients into ``.venv-peers``).  Each
number is the median of ``--repeat`` runs; the table gives logstrand's ratio
against each peer: throughput ratio, or the peer's latency over logstrand's
(above 1: logstrand is better).  ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trio

import logstrand
from logstrand.client import ColumnBatch, RecordRun
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.security import Credentials
from logstrand.testing import LocalCluster, cpu_s, rss_mb

SMALL, LARGE = 100, 10 * 1024
WINDOW = 1000
ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT.parent / "shared" / "bench" / "peers.py"
PEER_VENV = ROOT / ".venv-peers"
PEER_PACKAGES = ("nats-py==2.16.0", "redis==8.1.0", "hiredis==3.5.0")

# -- measuring ---------------------------------------------------------------------


class Block:
    """Wall time, CPU (this process, the nodes) and the nodes' peak RSS (sampled
    every 20 ms by a thread) of one measured block."""

    def __init__(self, node_pids: list[int]) -> None:
        self.node_pids = node_pids
        self.peak_rss = 0.0
        self._done = threading.Event()

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak_rss = max(self.peak_rss, *(rss_mb(p) for p in self.node_pids))

    def __enter__(self) -> Block:
        os.sync()  # dirty pages of an earlier block are not flushed inside this one
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.n0 = cpu_s(self.node_pids)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.client_cpu = (time.process_time() - self.c0) / self.wall
        self.server_cpu = (cpu_s(self.node_pids) - self.n0) / self.wall
        self._done.set()
        self._sampler.join()


def row(
    system: str,
    test: str,
    n: int,
    size: int,
    block: Block | None = None,
    lat: list[float] | None = None,
) -> dict[str, Any]:
    r: dict[str, Any] = {"peer": system, "test": test, "records": n, "record_bytes": size}
    if block is not None:
        r["rec_s"] = n / block.wall
        r["MB_s"] = n * size / block.wall / 1e6
        r["client_cpu"] = block.client_cpu
        r["server_cpu"] = block.server_cpu
        r["node_rss_peak_mb"] = block.peak_rss
    if lat:
        lat = sorted(lat)
        r["p50_ms"] = lat[len(lat) // 2] * 1000
        r["p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    return r


# -- the logstrand workload ----------------------------------------------------------


async def _throughput(
    url: str, pids: list[int], system: str, scale: float, creds: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    async with logstrand.open_client(url, credentials=Credentials.build(**creds)) as client:
        await client.append(3, b"warm-up")
        for log, size, count in ((1, SMALL, 200_000), (2, LARGE, 20_000)):
            n = max(WINDOW, int(count * scale)) // WINDOW * WINDOW
            payloads = [os.urandom(size // 2).hex().encode() for _ in range(WINDOW)]
            with Block(pids) as b:
                for _ in range(n // WINDOW):
                    await client.append_batch(log, payloads)
            tag = "100B" if size == SMALL else "10KiB"
            rows.append(row(system, f"append {tag}: append_batch of {WINDOW}", n, size, b))
        lat = []
        payload = b"l" * SMALL
        for _ in range(max(100, int(5000 * scale))):
            t0 = time.perf_counter()
            await client.append(3, payload)
            lat.append(time.perf_counter() - t0)
        rows.append(row(system, "append latency 100B: sequential append", len(lat), SMALL, lat=lat))
        for log, size in ((1, SMALL), (2, LARGE)):
            tag = "100B" if size == SMALL else "10KiB"
            for how in BACKFILLS:
                with Block(pids) as b:
                    count = await _backfill(client, log, how)
                rows.append(row(system, f"backfill {tag}: {how}", count, size, b))
    return rows


#: the three ways ``_backfill`` reads a log
BACKFILLS = ("numpy columns", "column views", "Record objects")


async def _backfill(client: logstrand.AsyncClient, log: int, how: str) -> int:
    """Read ``log`` from the start to its tail; the records read."""
    count = 0
    async with client.read(log) as reader:
        if how == "Record objects":
            async for item in reader:
                count += isinstance(item, logstrand.Record)
        elif how == "column views":
            async for items in reader.batches():
                count += sum(len(i) for i in items if isinstance(i, RecordRun))
        else:  # what read_columns does: every key and payload into numpy buffers
            async for items in reader.batches():
                count += len(ColumnBatch.of(log, items).lsn)
    return count


async def _delivery(
    url: str, pids: list[int], system: str, scale: float, creds: dict[str, str]
) -> list[dict[str, Any]]:
    """Idempotence on and off (logs 5 and 6), then reading log 1 plainly and
    with a consumer group committing as it goes: each pair in turns, so both
    sides of a ratio see the same cluster state."""
    rows: dict[str, list[dict[str, Any]]] = {}
    n = max(WINDOW, int(200_000 * scale)) // WINDOW * WINDOW
    payloads = [os.urandom(SMALL // 2).hex().encode() for _ in range(WINDOW)]
    credentials = Credentials.build(**creds)
    for turn in range(2):
        for idempotent in (turn == 0, turn != 0):
            settings = logstrand.ClientSettings(idempotent=idempotent)
            async with logstrand.open_client(
                url, settings=settings, credentials=credentials
            ) as client:
                log = 5 if idempotent else 6
                await client.append(log, b"warm-up")
                with Block(pids) as b:
                    for _ in range(n // (2 * WINDOW)):
                        await client.append_batch(log, payloads)
            name = f"idempotence {'on' if idempotent else 'off'}: append 100B, append_batch"
            rows.setdefault(name, []).append(row(system, name, n // 2, SMALL, b))
    async with logstrand.open_client(url, credentials=credentials) as client:
        for turn in range(2):
            for grouped in (turn == 0, turn != 0):
                group = f"bench-{turn}" if grouped else None
                with Block(pids) as b:
                    count = 0
                    async with client.read(1, group=group, autocommit=grouped) as reader:
                        async for item in reader:
                            count += isinstance(item, logstrand.Record)
                name = "read 100B: " + ("group, autocommit" if grouped else "no group")
                rows.setdefault(name, []).append(row(system, name, count, SMALL, b))
    # The better of the two turns of each.
    return [max(pair, key=lambda r: r["rec_s"]) for pair in rows.values()]


def json_like(n: int, seed: int = 7) -> list[bytes]:
    """``n`` JSON documents shaped like service events (about 330 B each): the
    same field names in every record, values from small vocabularies, ids and
    numbers random."""
    rnd = random.Random(seed)
    actions = ["view", "click", "add_to_cart", "checkout", "login", "logout", "search"]
    paths = [f"/api/v2/{a}/{b}" for a in ("items", "users", "carts", "orders") for b in "abcdef"]
    agents = ["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh)", "okhttp/4.12.0"]
    out = []
    for i in range(n):
        doc = {
            "event_id": f"{rnd.getrandbits(128):032x}",
            "ts": f"2026-11-23T10:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z",
            "user": {"id": rnd.randrange(1_000_000), "country": rnd.choice(["DE", "FR", "US"])},
            "action": rnd.choice(actions),
            "path": rnd.choice(paths),
            "status": rnd.choice([200, 200, 200, 201, 204, 404, 500]),
            "latency_ms": round(rnd.expovariate(1 / 40), 2),
            "user_agent": rnd.choice(agents),
            "session": {"id": f"{rnd.getrandbits(64):016x}", "page_views": rnd.randrange(50)},
        }
        out.append(json.dumps(doc).encode())
    return out


async def _compression(
    url: str, pids: list[int], system: str, scale: float, creds: dict[str, str]
) -> list[dict[str, Any]]:
    """The same JSON-like records in log 11 (no compression) and 12 (zstd)."""
    rows = []
    n = max(WINDOW, int(100_000 * scale)) // WINDOW * WINDOW
    docs = json_like(n)
    size = sum(map(len, docs)) // n
    async with logstrand.open_client(url, credentials=Credentials.build(**creds)) as client:
        for log, codec in ((11, "none"), (12, "zstd")):
            with Block(pids) as b:
                for lo in range(0, n, WINDOW):
                    await client.append_batch(log, docs[lo : lo + WINDOW])
            rows.append(row(system, f"json {codec}: append_batch of {WINDOW}", n, size, b))
            stored = await client.data_size(log)
            with Block(pids) as b:
                count = await _backfill(client, log, "numpy columns")
            r = row(system, f"json {codec}: backfill, numpy columns", count, size, b)
            r["stored_bytes"] = stored
            rows.append(r)
    return rows


def _tail_follower(url: str, log: int, n: int, ready: Any, out: Any, creds: dict[str, str]) -> None:
    delivered: dict[int, float] = {}
    with logstrand.connect(url, credentials=Credentials.build(**creds)) as client:
        start = client.tail_lsn(log) + 1
        ready.set()
        for item in client.read(log, start, None):
            if isinstance(item, logstrand.Record) and item.payload and item.payload[:1] == b"t":
                delivered[int(item.payload[1:9])] = time.perf_counter()
                if len(delivered) >= n:
                    break
    out.put(delivered)


def _tail(url: str, n: int, rate: int, creds: dict[str, str]) -> tuple[list[float], list[float]]:
    """send -> delivery and ack -> delivery, appender and follower in two processes
    (perf_counter is CLOCK_MONOTONIC: one clock for both)."""
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    follower = ctx.Process(target=_tail_follower, args=(url, 4, n, ready, out, creds))
    follower.start()
    sent: dict[int, float] = {}
    acked: dict[int, float] = {}
    try:
        with logstrand.connect(url, credentials=Credentials.build(**creds)) as client:
            client.append(4, b"warm-up")
            if not ready.wait(60):
                raise RuntimeError("the tail follower did not start")
            time.sleep(0.3)
            pad = b"." * (SMALL - 9)
            t0 = time.perf_counter()
            for i in range(n):
                now = time.perf_counter()
                sent[i] = now
                client.append(4, b"t" + b"%08d" % i + pad)
                acked[i] = time.perf_counter()
                time.sleep(max(0.0, t0 + (i + 1) / rate - time.perf_counter()))
        delivered = out.get(timeout=60)
    finally:
        follower.join(timeout=30)
        if follower.is_alive():
            follower.kill()
    e2e = [delivered[i] - sent[i] for i in sent if i in delivered]
    a2d = [delivered[i] - acked[i] for i in acked if i in delivered]
    return e2e, a2d


def logstrand_round(
    replication: int, scale: float, tail_rate: int, *, tls: bool = False
) -> list[dict[str, Any]]:
    """One run on a fresh cluster; with ``tls``, TLS on every connection and
    the client authenticated by a token (``dev up --secure``)."""
    system = f"logstrand (3 nodes, R={replication}{', TLS' if tls else ''})"
    with (
        tempfile.TemporaryDirectory(prefix="logstrand-compare-") as d,
        LocalCluster(d, nodes=3, secure=tls) as cluster,
    ):
        with open_epoch_store(cluster.url) as store:
            store.create_logs(1, 10, LogAttributes(replication_factor=replication))
            for log, codec in ((11, "none"), (12, "zstd")):
                attributes = LogAttributes(replication_factor=replication, compression=codec)
                store.create_logs(log, log, attributes)
        if tls:
            time.sleep(2.5)  # nodes re-read users and grants every 2 s
        creds = cluster.client_options
        pids = [p.pid for p in cluster.procs.values()]
        rows = trio.run(_throughput, cluster.url, pids, system, scale, creds)
        if replication == 2 and not tls:
            rows += trio.run(_compression, cluster.url, pids, system, scale, creds)
            rows += trio.run(_delivery, cluster.url, pids, system, scale, creds)
        n = max(100, int(2000 * scale))
        e2e, a2d = _tail(cluster.url, n, tail_rate, creds)
        rows.append(
            row(system, f"tail 100B @{tail_rate}/s: append-ack -> delivery", n, SMALL, lat=a2d)
        )
        rows.append(
            row(
                system,
                f"tail 100B @{tail_rate}/s: send -> delivery (end-to-end)",
                n,
                SMALL,
                lat=e2e,
            )
        )
    return rows


# -- the peers -------------------------------------------------------------------------


def _ensure_peers() -> str | None:
    """The Python that runs peers.py (None when the peers cannot run here)."""
    if not PEERS.exists():
        print(f"no {PEERS}: peers skipped", file=sys.stderr)
        return None
    missing = [p for p in ("nats-server", "redis-server") if shutil.which(p) is None]
    if missing:
        if os.geteuid() != 0:
            print(f"missing {missing} and not root: peers skipped", file=sys.stderr)
            return None
        print(f"installing {' '.join(missing)} from Debian", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # apt's chatter goes to stderr: the table owns stdout.
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            subprocess.run(cmd, env=env, check=True, stdout=sys.stderr)
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    check = subprocess.run([str(python), "-c", "import nats, redis, hiredis"], capture_output=True)
    if check.returncode != 0:
        print(f"installing {' '.join(PEER_PACKAGES)} into {PEER_VENV}", file=sys.stderr)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                *PEER_PACKAGES,
            ],
            check=True,
        )
    return str(python)


def run_peers(scale: float, repeat: int, tail_rate: int, peers: str) -> dict[str, Any] | None:
    python = _ensure_peers()
    if python is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [
                python,
                str(PEERS),
                "--scale",
                str(scale),
                "--repeat",
                str(repeat),
                "--tail-rate",
                str(tail_rate),
                "--peers",
                peers,
                "--json",
                out.name,
            ],
            check=True,
            stdout=sys.stderr,  # its own table: for the record, not for our output
        )
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
    return result


# -- the table ---------------------------------------------------------------------------

#: (our test, how we find it among logstrand's rows, among the peers' rows, kind):
#: each backfill of ours against the peers' best backfill
TESTS = [
    ("append 100B", "append 100B", "append 100B", "rec_s"),
    ("append 10KiB", "append 10KiB", "append 10KiB", "rec_s"),
    ("append latency 100B (p50/p99 ms)", "append latency 100B", "append latency 100B", "p50_ms"),
    ("backfill 100B, numpy columns", "backfill 100B: numpy", "backfill 100B", "rec_s"),
    ("backfill 100B, column views", "backfill 100B: column views", "backfill 100B", "rec_s"),
    ("backfill 100B, Record objects", "backfill 100B: Record", "backfill 100B", "rec_s"),
    ("backfill 10KiB, numpy columns", "backfill 10KiB: numpy", "backfill 10KiB", "rec_s"),
    ("backfill 10KiB, Record objects", "backfill 10KiB: Record", "backfill 10KiB", "rec_s"),
    ("tail send -> delivery (p50/p99 ms)", "send -> delivery", "send -> delivery", "p50_ms"),
    (
        "tail append-ack -> delivery (p50/p99 ms)",
        "append-ack -> delivery",
        "append-ack -> delivery",
        "p50_ms",
    ),
]


def _best(
    rows: list[dict[str, Any]], system: str, pattern: str, kind: str
) -> dict[str, Any] | None:
    """A system's best row for a test (peers have several ways to do some)."""
    found = [r for r in rows if r["peer"] == system and pattern in r["test"] and kind in r]
    if not found:
        return None
    if kind == "rec_s":
        return max(found, key=lambda r: r["rec_s"])
    return min(found, key=lambda r: r["p50_ms"])


def _median_rows(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rows in runs:
        for r in rows:
            groups.setdefault((r["peer"], r["test"]), []).append(r)
    out = []
    for group in groups.values():
        m = dict(group[0])
        keys = ("rec_s", "MB_s", "p50_ms", "p99_ms", "client_cpu", "server_cpu")
        for k in (*keys, "node_rss_peak_mb", "stored_bytes"):
            if k in m:
                m[k] = statistics.median(g[k] for g in group)
        m["runs"] = len(group)
        out.append(m)
    return out


def _cell(r: dict[str, Any] | None, kind: str) -> str:
    if r is None:
        return "-"
    if kind == "rec_s":
        return f"{r['rec_s']:,.0f}"
    return f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}"


def _ratio(ours: dict[str, Any] | None, theirs: dict[str, Any] | None, kind: str) -> str:
    if ours is None or theirs is None:
        return "-"
    if kind == "rec_s":
        return f"{ours['rec_s'] / theirs['rec_s']:.2f}x"
    if ours["p50_ms"] <= 0 or theirs["p50_ms"] <= 0:
        return "-"
    return f"{theirs['p50_ms'] / ours['p50_ms']:.2f}x"


def table(rows: list[dict[str, Any]]) -> str:
    systems = list(dict.fromkeys(r["peer"] for r in rows))
    ours = [s for s in systems if s.startswith("logstrand")]
    peers = [s for s in systems if not s.startswith("logstrand")]
    r2 = next((s for s in ours if "R=2" in s and "TLS" not in s), None)
    r1 = next((s for s in ours if "R=1" in s and "TLS" not in s), None)
    head = ["test", *systems]
    head += [f"R=2 vs {p.split(' (')[0]}{_mode(p)}" for p in peers]
    head += [f"R=1 vs {p.split(' (')[0]}{_mode(p)}" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for label, mine, theirs, kind in TESTS:
        best = {s: _best(rows, s, mine if s in ours else theirs, kind) for s in systems}
        cells = [_cell(best[s], kind) for s in systems]
        cells += [_ratio(best.get(r2) if r2 else None, best[p], kind) for p in peers]
        cells += [_ratio(best.get(r1) if r1 else None, best[p], kind) for p in peers]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tls_table(ours: list[dict[str, Any]]) -> str:
    """Each TLS row against the same R without TLS (medians of the same invocation)."""
    systems = list(dict.fromkeys(r["peer"] for r in ours))
    lines: list[str] = []
    for tls in (s for s in systems if "TLS" in s):
        plain = tls.replace(", TLS", "")
        if plain not in systems:
            continue
        if not lines:
            lines = ["| test | without TLS | TLS and tokens | ratio |", "|---|---:|---:|---:|"]
        for label, pattern, _, kind in TESTS:
            a, b = _best(ours, plain, pattern, kind), _best(ours, tls, pattern, kind)
            name = f"{label} ({plain.split('(')[1].rstrip(')')})"
            lines.append(f"| {name} | {_cell(a, kind)} | {_cell(b, kind)} | {_ratio(b, a, kind)} |")
    return "\n".join(lines)


def node_cpu_per_million(r: dict[str, Any]) -> float:
    """The nodes' CPU seconds per million records of a throughput row."""
    return float(r["server_cpu"]) / float(r["rec_s"]) * 1e6


def _serving_table(ours: list[dict[str, Any]]) -> str:
    """What serving a backfill costs the nodes: CPU per million records, peak RSS."""
    lines = [
        "| system | backfill | records/s | nodes' CPU s per million records "
        "| nodes' peak RSS MiB |",
        "|---|---|---:|---:|---:|",
    ]
    for r in ours:
        if r["test"].startswith("backfill") and "server_cpu" in r:
            rss = f"{r['node_rss_peak_mb']:.0f}" if "node_rss_peak_mb" in r else "-"
            lines.append(
                f"| {r['peer']} | {r['test'].removeprefix('backfill ')} | {r['rec_s']:,.0f} "
                f"| {node_cpu_per_million(r):.2f} | {rss} |"
            )
    return "\n".join(lines)


def _compression_table(ours: list[dict[str, Any]]) -> str:
    """zstd against no compression on the same JSON-like records."""
    by = {r["test"]: r for r in ours if r["test"].startswith("json ")}
    none_b, zstd_b = (
        by.get("json none: backfill, numpy columns"),
        by.get("json zstd: backfill, numpy columns"),
    )
    none_a, zstd_a = (
        by.get("json none: append_batch of 1000"),
        by.get("json zstd: append_batch of 1000"),
    )
    if not (none_b and zstd_b and none_a and zstd_a):
        return ""
    return "\n".join(
        [
            f"JSON-like records of {none_b['record_bytes']} B, R=2:",
            "",
            "| figure | no compression | zstd | zstd / none |",
            "|---|---:|---:|---:|",
            f"| bytes stored per copy | {none_b['stored_bytes']:,} | {zstd_b['stored_bytes']:,} "
            f"| {zstd_b['stored_bytes'] / none_b['stored_bytes']:.2f}x |",
            f"| append rec/s | {none_a['rec_s']:,.0f} | {zstd_a['rec_s']:,.0f} "
            f"| {zstd_a['rec_s'] / none_a['rec_s']:.2f}x |",
            f"| backfill rec/s (numpy columns) | {none_b['rec_s']:,.0f} | {zstd_b['rec_s']:,.0f} "
            f"| {zstd_b['rec_s'] / none_b['rec_s']:.2f}x |",
        ]
    )


def _delivery_table(ours: list[dict[str, Any]]) -> str:
    """Idempotence on against off, and a group with autocommit against none
    (issue 20's aims: at least 0.9x each)."""
    lines: list[str] = []
    pairs = (
        ("append 100B", "idempotence on: append 100B", "idempotence off: append 100B"),
        ("read 100B", "read 100B: group, autocommit", "read 100B: no group"),
    )
    for system in dict.fromkeys(r["peer"] for r in ours):
        for label, a_name, b_name in pairs:
            a = next(
                (r for r in ours if r["peer"] == system and r["test"].startswith(a_name)), None
            )
            b = next(
                (r for r in ours if r["peer"] == system and r["test"].startswith(b_name)), None
            )
            if a is None or b is None:
                continue
            if not lines:
                lines = ["| system | test | with | without | ratio |", "|---|---|---:|---:|---:|"]
            what = "idempotence" if label.startswith("append") else "group + autocommit"
            lines.append(
                f"| {system} | {label}, {what} | {a['rec_s']:,.0f} | {b['rec_s']:,.0f} "
                f"| {a['rec_s'] / b['rec_s']:.2f}x |"
            )
    return "\n".join(lines)


def _mode(peer: str) -> str:
    if "everysec" in peer:
        return " everysec"
    if "always" in peer:
        return " always"
    return ""


def _fmt(r: dict[str, Any], key: str, spec: str) -> str:
    return format(r[key], spec) if key in r else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every record count")
    ap.add_argument("--repeat", type=int, default=3, help="runs of everything; medians shown")
    ap.add_argument("--tail-rate", type=int, default=1000, help="tail-test append rate, rec/s")
    ap.add_argument("--peers", default="jetstream,redis-everysec,redis-always")
    ap.add_argument("--no-peers", action="store_true", help="logstrand only")
    ap.add_argument("--replication", default="2,1", help="logstrand rows to run")
    ap.add_argument(
        "--tls", default="2", help="R values to run again with TLS and tokens ('' for none)"
    )
    ap.add_argument("--json", help="write every number here")
    args = ap.parse_args()
    started = time.time()
    runs: list[list[dict[str, Any]]] = []
    for i in range(args.repeat):
        for r in (int(x) for x in args.replication.split(",")):
            print(f"logstrand R={r}, run {i + 1} of {args.repeat}", file=sys.stderr)
            runs.append(logstrand_round(r, args.scale, args.tail_rate))
        for r in (int(x) for x in args.tls.split(",") if x):
            print(f"logstrand R={r} with TLS, run {i + 1} of {args.repeat}", file=sys.stderr)
            runs.append(logstrand_round(r, args.scale, args.tail_rate, tls=True))
    ours = _median_rows(runs)
    peers = (
        None if args.no_peers else run_peers(args.scale, args.repeat, args.tail_rate, args.peers)
    )
    rows = ours + (peers["rows"] if peers else [])
    print(
        f"scale {args.scale}, medians of {args.repeat} runs, {platform.node()} "
        f"({os.cpu_count()} cores), {time.time() - started:.0f} s"
    )
    print()
    print(table(rows))
    print()
    tls_table = _tls_table(ours)
    if tls_table:
        print(tls_table)
        print()
    for extra in (_serving_table(ours), _compression_table(ours), _delivery_table(ours)):
        if extra:
            print(extra)
            print()
    print("| system | test | rec/s | MB/s | p50 ms | p99 ms | client CPU | nodes' CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for line in ours:
        cells = [
            _fmt(line, "rec_s", ",.0f"),
            _fmt(line, "MB_s", ".1f"),
            _fmt(line, "p50_ms", ".3f"),
            _fmt(line, "p99_ms", ".3f"),
            _fmt(line, "client_cpu", ".0%"),
            _fmt(line, "server_cpu", ".0%"),
        ]
        print(f"| {line['peer']} | {line['test']} | " + " | ".join(cells) + " |")
    if args.json:
        doc = {
            "workload": {"scale": args.scale, "repeat": args.repeat, "tail_rate": args.tail_rate},
            "rows": rows,
            "logstrand_runs": runs,
            "peers": peers,
            "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": sys.version},
        }
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()

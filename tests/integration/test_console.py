"""The console's HTTP admin API, served by real nodes (``--http-port``):
what it answers, what it refuses, and its OpenAPI document checked against
the running server."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster
from logstrand.types import format_lsn

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three nodes serving the console; logs 1..99, and 100..100000 named "events"."""
    with LocalCluster(tmp_path_factory.mktemp("console"), nodes=3, console=True) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 99, LogAttributes(replication_factor=2))
            store.create_logs(100, 100_000, LogAttributes(replication_factor=2), name="events")
        yield c


def base(c: LocalCluster, node: int = 1) -> str:
    return c.console_urls[node]


def call(url: str, method: str = "GET", body: Any = None, raw: bytes | None = None) -> Any:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=15) as r:
        assert r.headers["content-type"].startswith("application/json")
        return json.loads(r.read())


def refused(
    url: str, status: int, method: str = "GET", body: Any = None, raw: bytes | None = None
) -> str:
    with pytest.raises(urllib.error.HTTPError) as err:
        call(url, method, body, raw)
    with err.value:
        answer = err.value.read()
    assert err.value.code == status, answer
    message: str = json.loads(answer)["error"]
    return message


def test_status_shows_every_node_with_its_console_and_cli_agrees(cluster: LocalCluster) -> None:
    doc = call(base(cluster) + "/api/status")
    assert [n["node_id"] for n in doc["nodes"]] == [1, 2, 3]
    assert all(n["state"] == "alive" for n in doc["nodes"])
    ports = {n: int(u.rsplit(":", 1)[1]) for n, u in cluster.console_urls.items()}
    assert [n["http"] for n in doc["nodes"]] == [f"127.0.0.1:{ports[i]}" for i in (1, 2, 3)]
    assert all(n["counters"] is not None for n in doc["nodes"])
    assert doc["logs"] == 100_000
    assert doc["rebuilding"] is None
    # Any node's console says the same.
    other = call(base(cluster, 3) + "/api/status")
    assert [n["http"] for n in other["nodes"]] == [n["http"] for n in doc["nodes"]]
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "logstrand", "status", "--json", "--url", cluster.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert [n["http"] for n in json.loads(out.stdout)["nodes"]] == [n["http"] for n in doc["nodes"]]


def test_the_log_list_pages_through_100000_logs_without_loading_them(cluster: LocalCluster) -> None:
    page = call(base(cluster) + "/api/logs?limit=5")
    assert page["total"] == 99 + 99_901
    assert [x["log_id"] for x in page["logs"]] == [1, 2, 3, 4, 5]
    t0 = time.perf_counter()
    last = call(base(cluster) + "/api/logs?offset=99990&limit=100")
    assert time.perf_counter() - t0 < 1.0
    assert [x["log_id"] for x in last["logs"]] == list(range(99_991, 100_001))
    named = call(base(cluster) + "/api/logs?q=EVEN&limit=2")
    assert named["total"] == 99_901
    assert [x["log_id"] for x in named["logs"]] == [100, 101]
    assert {x["range"]["name"] for x in named["logs"]} == {"events"}
    span = call(base(cluster) + "/api/logs?q=95..105&limit=100")
    assert [x["log_id"] for x in span["logs"]] == list(range(95, 106))
    assert call(base(cluster) + "/api/logs?q=7")["total"] == 1
    ranges = call(base(cluster) + "/api/ranges")["ranges"]
    assert [(r["first"], r["last"], r["name"]) for r in ranges][:2] == [
        (1, 99, None),
        (100, 100_000, "events"),
    ]
    assert ranges[1]["attributes"]["replication_factor"] == 2
    assert call(base(cluster) + "/api/logs?q=nothing-like-this")["total"] == 0
    assert "limit" in refused(base(cluster) + "/api/logs?limit=0", 400)
    assert "limit" in refused(base(cluster) + "/api/logs?limit=x", 400)


def test_a_log_its_records_and_how_payloads_are_shown(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        t0 = int(time.time() * 1000)
        lsns = client.append_batch(
            5, [b'{"user": 1}', b"plain text", b"\xff\xfe binary", b"x" * 5000], keys=[b"k"] * 4
        )
    info = call(base(cluster) + "/api/logs/5")
    assert info["tail"] == lsns[-1]
    assert info["tail_text"] == format_lsn(lsns[-1])
    assert info["nodeset"]
    assert info["epochs"][0]["nodeset"] == info["nodeset"]
    assert info["attributes"]["replication_factor"] == 2
    page = call(base(cluster) + "/api/logs/5/records?start=oldest&limit=10")
    items = page["items"]
    assert [x["lsn"] for x in items] == lsns
    assert page["at_tail"]
    assert items[0]["payload"]["json"] == {"user": 1}
    assert items[1]["payload"]["text"] == "plain text"
    assert items[2]["payload"]["hex"] == b"\xff\xfe binary".hex()
    assert items[3]["payload"]["truncated"]
    assert items[3]["payload"]["size"] == 5000
    assert items[0]["key"]["text"] == "k"
    two = call(base(cluster) + "/api/logs/5/records?start=tail&limit=2")
    assert [x["lsn"] for x in two["items"]] == lsns[-2:]
    at = call(base(cluster) + f"/api/logs/5/records?start={format_lsn(lsns[1])}&limit=1")
    assert [x["lsn"] for x in at["items"]] == [lsns[1]]
    assert at["next"] == lsns[2]
    since = call(base(cluster) + f"/api/logs/5/records?start=time:{t0 - 1000}&limit=10")
    assert [x["lsn"] for x in since["items"]] == lsns
    assert "start must be" in refused(base(cluster) + "/api/logs/5/records?start=bogus", 400)
    assert "log 77777777" in refused(base(cluster) + "/api/logs/77777777", 404)
    assert "log must be an integer" in refused(base(cluster) + "/api/logs/abc", 400)


def _events(url: str, want: int, timeout_s: float) -> list[dict[str, Any]]:
    """Server-sent events from ``url`` until ``want`` records came (or the time is up)."""
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    path = "/" + url.removeprefix("http://").split("/", 1)[1]
    got: list[dict[str, Any]] = []
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        buf = b""
        deadline = time.monotonic() + timeout_s
        records = 0
        while time.monotonic() < deadline and records < want:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
            while b"data: " in buf and b"\n\n" in buf.split(b"data: ", 1)[1]:
                _, rest = buf.split(b"data: ", 1)
                line, buf = rest.split(b"\n\n", 1)
                event = json.loads(line)
                event["at"] = time.monotonic()
                got.append(event)
                records += len(event.get("records", ()))
    return got


def test_the_live_tail_pushes_new_records_within_a_second(cluster: LocalCluster) -> None:
    import threading

    appended: list[float] = []

    def append_later() -> None:
        time.sleep(1.0)
        with logstrand.connect(cluster.url) as client:
            appended.append(time.monotonic())
            client.append(6, b"live one")

    t = threading.Thread(target=append_later)
    t.start()
    events = _events(base(cluster, 2) + "/api/logs/6/tail", 1, 8)
    t.join()
    assert events[0]["type"] == "start"
    [shown] = [e for e in events if e["type"] == "records"]
    assert [r["payload"]["text"] for r in shown["records"]] == ["live one"]
    assert shown["at"] - appended[0] < 1.0
    assert "log 88888888" in refused(base(cluster) + "/api/logs/88888888/tail", 404)


def test_trim_with_a_dry_run_first(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(7, [b"r%d" % i for i in range(100)])
    url = base(cluster) + "/api/logs/7/trim"
    dry = call(url, "POST", {"to": format_lsn(lsns[39]), "dry_run": True})
    assert dry["dry_run"]
    assert dry["head"] == lsns[39]
    assert dry["head_before"] == 0
    assert dry["records_approx"] == 40
    assert call(base(cluster) + "/api/logs/7")["head"] == 0  # nothing moved
    done = call(url, "POST", {"to": lsns[39], "dry_run": False})
    assert done["head"] == lsns[39]
    assert call(base(cluster) + "/api/logs/7")["head"] == lsns[39]
    assert "tail" in refused(url, 400, "POST", {"to": lsns[-1] + 10})
    assert "one of to" in refused(url, 400, "POST", {})
    assert "dry_run" in refused(url, 400, "POST", {"to": 1, "dry_run": "yes"})
    assert "not JSON" in refused(url, 400, "POST", raw=b"{nope")
    assert "at most" in refused(url, 413, "POST", raw=b"[" + b" " * 70_000 + b"]")
    assert "not allowed" in refused(url, 405)


def test_groups_their_lag_and_a_reset_with_a_dry_run(cluster: LocalCluster) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(8, [b"g%d" % i for i in range(30)])
        client.commit("billing", 8, lsns[9])
    groups = call(base(cluster) + "/api/groups")["groups"]
    [billing] = [g for g in groups if g["group"] == "billing"]
    assert billing["lag_records"] == 20
    doc = call(base(cluster) + "/api/groups/billing")
    assert [(x["log_id"], x["committed"], x["lag_records"]) for x in doc["logs"]] == [
        (8, lsns[9], 20)
    ]
    url = base(cluster) + "/api/groups/billing/reset"
    dry = call(
        url, "POST", {"log": 8, "how": "lsn", "value": format_lsn(lsns[19]), "dry_run": True}
    )
    # Reset to an LSN: the group reads on from it (it has processed the one before).
    assert (dry["committed_before"], dry["committed"]) == (lsns[9], lsns[18])
    assert call(base(cluster) + "/api/groups/billing")["logs"][0]["committed"] == lsns[9]
    call(url, "POST", {"log": 8, "how": "latest"})
    assert call(base(cluster) + "/api/groups/billing")["lag_records"] == 0
    assert "how must be" in refused(url, 400, "POST", {"log": 8, "how": "sideways"})
    assert "no-such-group" in refused(base(cluster) + "/api/groups/no-such-group", 404)


def test_drain_and_undrain_dry_runs_change_nothing_and_real_ones_do(cluster: LocalCluster) -> None:
    url = base(cluster) + "/api/nodes/3/drain"
    dry = call(url, "POST", {"dry_run": True})
    assert dry == {"node_id": 3, "dry_run": True, "storage_state": "FULLY_AUTHORITATIVE",
                   "draining": False}  # fmt: skip
    assert call(base(cluster) + "/api/status")["rebuilding"] is None
    assert "not drained" in refused(base(cluster) + "/api/nodes/3/undrain", 400, "POST", {})
    # For real: the node is draining (the page offers to undrain it), then back.
    assert call(url, "POST", {})["draining"]
    status = call(base(cluster) + "/api/status")
    assert status["drained"] == [3]
    assert status["rebuilding"]["nodes"] == [3]
    assert call(base(cluster) + "/api/nodes/3/undrain", "POST", {})["undrained"]
    status = call(base(cluster) + "/api/status")
    assert (status["drained"], status["rebuilding"]) == ([], None)
    assert "not in the cluster" in refused(base(cluster) + "/api/nodes/42/drain", 400, "POST", {})


def test_logs_are_created_and_changed_through_the_api(cluster: LocalCluster) -> None:
    made = call(
        base(cluster) + "/api/logs",
        "POST",
        {
            "first": 200_000,
            "last": 200_009,
            "name": "made",
            "attributes": {"replication_factor": 3},
        },
    )
    assert made["range"]["first"] == 200_000
    changed = call(
        base(cluster) + "/api/logs/200000", "PATCH", {"attributes": {"retention_ms": 3_600_000}}
    )
    assert changed["range"]["attributes"]["retention_ms"] == 3_600_000
    assert "unknown log attribute" in refused(
        base(cluster) + "/api/logs/200000", 400, "PATCH", {"attributes": {"colour": "red"}}
    )
    assert "inside range" in refused(
        base(cluster) + "/api/logs/200001", 400, "PATCH", {"attributes": {"retention_ms": 1000}}
    )
    with logstrand.connect(cluster.url) as client:
        assert client.append(200_005, b"x") > 0


def test_the_openapi_document_describes_the_running_server(cluster: LocalCluster) -> None:
    from openapi_spec_validator import validate

    doc = call(base(cluster) + "/openapi.json")
    validate(doc)
    with logstrand.connect(cluster.url) as client:
        client.commit("described", 9, client.append(9, b"x"))
    fill = {"log": "9", "group": "described", "node": "1", "txn": "t"}
    checked = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method != "get" or "application/json" not in op["responses"]["200"]["content"]:
                continue
            url = base(cluster) + path.format(**fill)
            answer = call(url)
            schema = op["responses"]["200"]["content"]["application/json"]["schema"]
            missing = set(schema["required"]) - set(answer)
            assert not missing, (path, missing)
            checked += 1
    assert checked == 8
    # Every route the server answers is in the document, and the other way round.
    for path, ops in doc["paths"].items():
        for method in ops:
            if method == "get":
                continue
            url = base(cluster) + path.format(**fill)
            with pytest.raises(urllib.error.HTTPError) as err:
                call(url, method.upper(), raw=b"{nope")
            err.value.close()
            assert err.value.code == 400, (method, path)


def test_garbage_and_slow_peers_leave_the_console_and_the_node_serving(
    cluster: LocalCluster,
) -> None:
    host, port = base(cluster).removeprefix("http://").split(":")
    for junk in (b"\x00\xff garbage\r\n\r\n", b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            try:
                s.sendall(junk)
                answer = s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                answer = b""
            assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:100]
    # A peer that sends half a request and never the rest holds nothing up.
    idle = socket.create_connection((host, int(port)), timeout=10)
    try:
        idle.sendall(b"POST /api/logs/7/trim HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert call(base(cluster) + "/api/status")["nodes"][0]["state"] == "alive"
    finally:
        idle.close()
    assert cluster.alive(1)


def test_a_port_taken_is_one_line_of_error_for_a_node_and_for_the_console(
    cluster: LocalCluster,
) -> None:
    import subprocess
    import sys

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        alone = subprocess.run(
            [
                sys.executable,
                "-m",
                "logstrand",
                "console",
                "--url",
                cluster.url,
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert alone.returncode == 1
        why = "Address already in use"
        assert alone.stderr.strip() == f"error: cannot listen on 127.0.0.1:{port}: {why}"
        cluster.stop_node(3)
        node = subprocess.run(
            [sys.executable, "-m", "logstrand", "node", "--url", cluster.url, "--id", "3",
             "--http-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        assert node.returncode == 2
        assert node.stderr.strip().splitlines()[-1] == (
            f"error: --http-port {port}: cannot listen on 127.0.0.1: {why}"
        )
    finally:
        taken.close()
        cluster.start_node(3)
    assert call(base(cluster, 3) + "/api/status")["nodes"][2]["state"] == "alive"


def test_transactions_are_listed_and_an_open_one_aborted_after_a_dry_run(
    cluster: LocalCluster,
) -> None:
    from logstrand.errors import FencedError

    with logstrand.connect(cluster.url) as client:
        with client.transaction("console-done") as tx:
            tx.append(20, b"committed")
        stuck = client.transaction("console-stuck")
        stuck.__enter__()
        stuck.append(21, b"open")
        doc = call(base(cluster) + "/api/transactions")
        rows = {t["id"]: t for t in doc["transactions"]}
        # (Complete once the markers are in; the commit answers before.)
        assert rows["console-done"]["state"] in ("PrepareCommit", "CompleteCommit")
        assert (rows["console-stuck"]["state"], rows["console-stuck"]["logs"]) == ("Ongoing", [21])
        assert doc["open"] >= 1
        # A commit in PrepareCommit is still open (its markers are not in
        # yet, the LSO waits for them); they follow at once, in the background.
        deadline = time.monotonic() + 30
        while True:
            only_open = call(base(cluster) + "/api/transactions?open=true")["transactions"]
            if "console-done" not in [t["id"] for t in only_open] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "console-stuck" in [t["id"] for t in only_open]
        assert "console-done" not in [t["id"] for t in only_open]
        url = base(cluster) + "/api/transactions/console-stuck/abort"
        dry = call(url, "POST", {"dry_run": True})
        assert (dry["state_before"], dry["logs"], dry["aborted"]) == ("Ongoing", [21], False)
        stuck.append(21, b"still open after the dry run")
        assert call(url, "POST", {})["aborted"]
        with pytest.raises(FencedError):
            stuck.__exit__(None, None, None)  # its commit: fenced
        assert "no open transaction" in refused(url, 400, "POST", {})
        gone = base(cluster) + "/api/transactions/nobody/abort"
        assert "nobody" in refused(gone, 404, "POST", {"dry_run": True})
        assert "open must be" in refused(base(cluster) + "/api/transactions?open=maybe", 400)
        assert "dry_run" in refused(url, 400, "POST", {"dry_run": "yes"})

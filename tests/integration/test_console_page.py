"""The console's page in a real browser: Debian's chromium driven by
Playwright, against real nodes serving the console (``--http-port``)."""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

import pytest

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster
from logstrand.types import Record

if TYPE_CHECKING:
    from collections.abc import Iterator

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("page"), nodes=3, console=True) as c:
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 99, LogAttributes(replication_factor=2))
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert shutil.which("chromium"), "Debian's chromium is missing: make zookeeper installs it"
    with sync_playwright() as p:
        # No GPU, no extensions: the browser shares two cores with the
        # nodes of this test and of the other worker's.
        flags = ["--no-sandbox", "--disable-gpu", "--disable-extensions", "--mute-audio"]
        b = p.chromium.launch(executable_path=CHROMIUM, args=flags)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], errors  # no script error on any page


def test_the_overview_shows_the_nodes_of_the_cluster(cluster: LocalCluster, page: Any) -> None:
    page.goto(cluster.console_urls[1] + "/")
    page.wait_for_selector("#nodes .card >> nth=2")
    cards = page.locator("#nodes .card")
    assert cards.count() == 3
    for i in range(3):
        assert "alive" in (cards.nth(i).get_attribute("class") or "")
    assert "3 nodes, 99 logs" in page.locator("#summary").inner_text()


def test_the_overview_says_it_is_loading_until_the_status_comes(
    cluster: LocalCluster, page: Any
) -> None:
    """Captured at load (chromium --screenshot, as docs/console.md does),
    the overview was an empty page until its first API answer."""
    held: list[Any] = []
    page.route("**/api/status", lambda route: held.append(route))  # held: no answer yet
    page.goto(cluster.console_urls[1] + "/")
    page.wait_for_load_state("load")
    assert "Asking the cluster for its status" in page.locator("#summary").inner_text()
    assert "Loading the nodes" in page.locator("#nodes").inner_text()
    assert held  # the page did ask
    page.unroute("**/api/status")  # (playwright lets the held request go on)
    page.wait_for_selector("#nodes .card >> nth=2")
    assert "3 nodes" in page.locator("#summary").inner_text()


def test_the_logs_page_shows_ranges_searches_and_pages(cluster: LocalCluster, page: Any) -> None:
    page.goto(cluster.console_urls[3] + "/#/logs")
    page.wait_for_selector("#range-table tbody tr")
    assert "1..99" in page.locator("#range-table").inner_text()
    assert page.locator("#log-table tbody tr").count() == 99
    page.fill("#log-search", "5..7")
    page.press("#log-search", "Enter")
    page.wait_for_selector("#log-count:has-text('1–3 of 3')")
    assert page.locator("#log-table tbody tr").count() == 3


def test_an_appended_record_shows_in_the_live_tail_within_a_second(
    cluster: LocalCluster, page: Any
) -> None:
    page.goto(cluster.console_urls[2] + "/#/logs/11")
    page.click("#tail-toggle")
    page.wait_for_selector("#tail-note:has-text('following from')")
    with logstrand.connect(cluster.url) as client:
        t0 = time.monotonic()
        lsn = client.append(11, b'{"order": 42}')
        page.wait_for_selector(
            f"#tail-rows tr[data-lsn='{logstrand.format_lsn(lsn)}']", timeout=5000
        )
        took = time.monotonic() - t0
    assert took < 1.0, took
    assert '{"order":42}' in page.locator("#tail-rows").inner_text()
    # 1,000 appends a second for a second: the page keeps up (it samples and
    # says so when a flush brings more than it shows; bench/console.py runs
    # it for 5 s).
    with logstrand.connect(cluster.url) as client:
        t0 = time.monotonic()
        futures = []
        for i in range(1000):
            futures.append(client.append_async(11, b"burst %d" % i))
            pause = t0 + (i + 1) / 1000 - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        last = futures[-1].result(timeout=30)
    page.wait_for_selector(f"#tail-rows tr[data-lsn='{logstrand.format_lsn(last)}']", timeout=3000)
    assert "1,001 records arrived" in page.locator("#tail-note").inner_text()
    assert page.locator("#tail-rows tr").count() <= 500


def test_a_groups_lag_goes_down_as_a_reader_consumes(cluster: LocalCluster, page: Any) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(12, [b"e%d" % i for i in range(300)])
        client.commit("reader", 12, lsns[0])
        page.goto(cluster.console_urls[1] + "/#/groups/reader")
        page.wait_for_selector("#group-lag:has-text('299 records')")
        seen = []
        records = (r for r in client.read(12, lsns[1], until=lsns[-1]) if isinstance(r, Record))
        for n, record in enumerate(records, 1):
            if n % 100 == 0:
                client.commit("reader", 12, record.lsn)
                text = f"lag: {299 - n:,} records"
                page.wait_for_selector(f"#group-lag:has-text('{text}')", timeout=6000)
                seen.append(text)
    assert seen == ["lag: 199 records", "lag: 99 records"]


def test_a_reset_shows_its_dry_run_and_moves_the_position_once_confirmed(
    cluster: LocalCluster, page: Any
) -> None:
    with logstrand.connect(cluster.url) as client:
        lsns = client.append_batch(13, [b"r%d" % i for i in range(50)])
        client.commit("resettable", 13, lsns[-1])
    page.goto(cluster.console_urls[1] + "/#/groups/resettable")
    page.wait_for_selector("tr[data-log='13'] button.reset")
    page.once("dialog", lambda d: d.accept("earliest"))
    page.click("tr[data-log='13'] button.reset")
    page.wait_for_selector("#confirm[open]")
    body = page.locator("#confirm-body").inner_text()
    assert logstrand.format_lsn(lsns[-1]) in body  # where it is, from the dry run
    with logstrand.connect(cluster.url) as client:
        assert client.committed("resettable", 13) == lsns[-1]  # not moved yet
        page.click("#confirm-ok")
        deadline = time.monotonic() + 5
        while client.committed("resettable", 13) == lsns[-1]:
            assert time.monotonic() < deadline, "the reset did not happen"
            time.sleep(0.1)
        assert client.committed("resettable", 13) == 0


def test_an_open_transaction_is_listed_and_aborted_once_confirmed(
    cluster: LocalCluster, page: Any
) -> None:
    from logstrand.errors import FencedError

    with logstrand.connect(cluster.url) as client:
        stuck = client.transaction("page-stuck")
        stuck.__enter__()
        stuck.append(14, b"open")
        page.goto(cluster.console_urls[1] + "/#/transactions")
        row = "tr[data-txn='page-stuck']"
        page.wait_for_selector(row + " button.abort")
        assert "Ongoing" in page.locator(row).inner_text()
        page.click(row + " button.abort")
        page.wait_for_selector("#confirm[open]")
        assert "Ongoing in logs 14" in page.locator("#confirm-body").inner_text()  # the dry run
        stuck.append(14, b"still open: the dry run changed nothing")
        page.click("#confirm-ok")
        page.wait_for_function(
            "!document.querySelector(\"tr[data-txn='page-stuck'] button.abort\")", timeout=10_000
        )
        with pytest.raises(FencedError):
            stuck.__exit__(None, None, None)  # its commit: another aborted it


def test_a_killed_node_turns_red_within_its_failure_detection_time(
    cluster: LocalCluster, page: Any
) -> None:
    page.goto(cluster.console_urls[1] + "/")
    page.wait_for_selector("#nodes .card[data-node='3'].alive")
    t0 = time.monotonic()
    cluster.kill_node(3)
    page.wait_for_selector(
        "#nodes .card[data-node='3'].dead, #nodes .card[data-node='3'].unreachable",
        timeout=30_000,
    )
    took = time.monotonic() - t0
    assert took < 20, took
    assert "alive" in (page.locator("#nodes .card[data-node='1']").get_attribute("class") or "")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    """A secure cluster serving the console over HTTPS, and the token of a
    user ``viewer`` who may read logs 1..5 and nothing else."""
    from logstrand.security import hash_token, new_token

    with LocalCluster(
        tmp_path_factory.mktemp("secure-page"), nodes=3, console=True, secure=True
    ) as c:
        token = new_token()
        with open_epoch_store(c.url) as store:
            store.create_logs(1, 9, LogAttributes(replication_factor=2))
            store.add_user("viewer", hash_token(token))
            store.grant("viewer", 1, 5, frozenset({"read"}))
        yield c, token


def _get(url: str, token: str | None, ca: str, method: str = "GET") -> tuple[int, Any]:
    import json
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if method == "POST":
        req.add_header("content-type", "application/json")
    if token:
        req.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=15, context=context) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_in_secure_mode_the_api_takes_tokens_and_grants(secure: tuple[LocalCluster, str]) -> None:
    c, viewer = secure
    assert c.ca_path is not None
    base = c.console_urls[1]
    assert base.startswith("https://")
    with logstrand.connect(c.url, **c.client_options) as client:
        client.append(3, b"visible")
        client.append(9, b"secret")
    assert _get(base + "/api/logs/3", None, c.ca_path)[0] == 401
    assert _get(base + "/api/logs/3", "lst_not-a-token", c.ca_path) == (
        401,
        {"error": "unknown token"},
    )
    status, doc = _get(base + "/api/logs/3/records?start=oldest", viewer, c.ca_path)
    assert status == 200
    assert [x["payload"]["text"] for x in doc["items"]] == ["visible"]
    status, doc = _get(base + "/api/logs/9/records?start=oldest", viewer, c.ca_path)
    assert (status, doc["error"]) == (403, "user viewer may not read on log 9")
    assert _get(base + "/api/logs/3/trim", viewer, c.ca_path, "POST")[0] == 403
    assert _get(base + "/api/nodes/1/drain", viewer, c.ca_path, "POST")[0] == 403
    assert _get(base + "/api/status", viewer, c.ca_path)[0] == 200
    admin = c.admin_token
    status, doc = _get(base + "/api/logs/9/records?start=oldest", admin, c.ca_path)
    assert [x["payload"]["text"] for x in doc["items"]] == ["secret"]
    # The page and the OpenAPI document need no token: the page asks for one.
    assert _get(base + "/openapi.json", None, c.ca_path)[0] == 200


def test_a_user_without_a_grant_sees_an_error_not_data(
    secure: tuple[LocalCluster, str], browser: Any
) -> None:
    c, viewer = secure
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    try:
        page.goto(c.console_urls[2] + "/#/logs/9")
        page.wait_for_selector("#error:has-text('401')")
        page.fill("#token", viewer)
        page.dispatch_event("#token", "change")
        page.wait_for_selector("#error:has-text('may not read on log 9')")
        assert "secret" not in page.content()
        page.goto(c.console_urls[2] + "/#/logs/3")
        page.wait_for_selector("#log-info")
        page.wait_for_selector("#records-table")
        assert page.locator("#error").is_hidden()
    finally:
        context.close()

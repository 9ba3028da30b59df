"""Screenshots of every page of the console for docs/console.md.

    .venv/bin/python tools/console_screenshots.py [--out docs/console]

Starts a local 4-node cluster serving the console, fills it (10,000 logs,
JSON records, a consumer group behind, records arriving while the live tail
follows), takes each page with Debian's chromium through Playwright, and
last the overview while node 4, killed, is rebuilt (donors held to 16 KiB/s
so that the picture catches them at work).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import logstrand
from logstrand.epochstore import LogAttributes, open_epoch_store
from logstrand.testing import LocalCluster


def _fill(url: str) -> None:
    with open_epoch_store(url) as store:
        store.create_logs(1, 99, LogAttributes(replication_factor=2))
        store.create_logs(100, 10_099, LogAttributes(replication_factor=2), name="orders")
    with logstrand.connect(url) as client:
        events = [
            b'{"order": %d, "customer": "c-%d", "total": %d.%02d}' % (i, i % 17, i % 90, i % 100)
            for i in range(500)
        ]
        lsns = client.append_batch(100, events, keys=[b"c-%d" % (i % 17) for i in range(500)])
        client.commit("billing", 100, lsns[199])
        client.commit("audit", 100, lsns[-1])


def _appender(url: str, stop: threading.Event) -> None:
    with logstrand.connect(url) as client:
        i = 0
        while not stop.is_set():
            client.append(100, b'{"order": %d, "customer": "c-%d", "live": true}' % (1000 + i, i))
            i += 1
            time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=Path("docs/console"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="logstrand-shots-") as tmp,
        LocalCluster(
            Path(tmp) / "c", nodes=4, console=True, node_args=("--rebuild-rate", "16KiB")
        ) as c,
        sync_playwright() as p,
    ):
        _fill(c.url)
        base = c.console_urls[1]
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        stop = threading.Event()
        writer = threading.Thread(target=_appender, args=(c.url, stop))
        writer.start()
        try:
            page.goto(base + "/")
            page.wait_for_selector("#nodes .card >> nth=2")
            time.sleep(9)  # a few samples of the rates
            page.screenshot(path=str(args.out / "overview.png"), full_page=True)
            page.goto(base + "/#/logs?q=orders&offset=0")
            page.wait_for_selector("#log-table")
            page.screenshot(path=str(args.out / "logs.png"))
            page.goto(base + "/#/logs/100")
            page.wait_for_selector("#records-table")
            page.click("#tail-toggle")
            time.sleep(3)
            page.screenshot(path=str(args.out / "log.png"), full_page=True)
            page.goto(base + "/#/logs/100")  # the live tail alone, further down
            page.wait_for_selector("#records-table")
            page.click("#tail-toggle")
            time.sleep(3)
            page.locator("#tail-note").scroll_into_view_if_needed()
            page.screenshot(path=str(args.out / "tail.png"))
            page.goto(base + "/#/groups")
            page.wait_for_selector("#group-table")
            page.screenshot(path=str(args.out / "groups.png"))
            page.goto(base + "/#/groups/billing")
            page.wait_for_selector("#group-lag")
            time.sleep(5)
            page.screenshot(path=str(args.out / "group.png"))
            page.once("dialog", lambda d: d.accept("earliest"))
            page.click("tr[data-log='100'] button.reset")
            page.wait_for_selector("#confirm[open]")
            page.screenshot(path=str(args.out / "reset-confirm.png"))
            page.click("#confirm-cancel")
            # A node lost and rebuilt: the overview while the donors work.
            c.kill_node(4)
            with open_epoch_store(c.url) as store:
                store.request_rebuild(4)
            page.goto(base + "/")
            page.wait_for_selector("#rebuild-run")
            time.sleep(1)
            page.screenshot(path=str(args.out / "rebuilding.png"), full_page=True)
        finally:
            stop.set()
            writer.join()
            browser.close()
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()

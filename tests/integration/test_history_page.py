"""The history's charts on the status page (docs/operations.md, "History"):
after a few hours of synthetic minutes on several queues (driven through the
real commands on the DEBUG clock by ``leaseq.bench.history.fill``), the page
draws three inline SVG charts per queue for 1 h, 24 h and 72 h, chosen by
the buttons of a GET form (no script), loads nothing from elsewhere, escapes queue
names, and says so when there is nothing to draw; a click in Chromium on a
range button shows that range."""

from __future__ import annotations

import re

import pytest
from harness import DEBUG_ENV, unique
from harness_http import http_daemon, http_get, screenshot
from leaseq.bench.history import fill
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

QUEUES = ["emails", "orders", "thumbnails", "<b>odd</b>"]


@pytest.fixture(scope="module")
def charted(tmp_path_factory):
    d = http_daemon(tmp_path_factory.mktemp("charts") / "data", env=DEBUG_ENV)
    c = d.client(protocol=2)
    c.execute_command("DEBUG", "CLOCK", "FREEZE")
    fill(c, QUEUES, 3 * 60)                              # three hours of minutes
    c.execute_command("QCREATE", "idle-queue")
    yield d
    d.kill()


def page(d, query: str = "") -> str:
    status, ctype, body = http_get(d, "/" + query)
    assert status == 200 and ctype.startswith("text/html")
    return body


def history_part(body: str) -> str:
    start = body.index('<h2 id="history">')
    return body[start:body.index("<h2", start + 10)]


@pytest.mark.parametrize("query, span, per", [("", "1", "per minute"), ("?range=1h", "1", "per minute"),
                                              ("?range=24h", "24", "a point per 5 minutes"),
                                              ("?range=72h", "72", "a point per 15 minutes")])
def test_each_range_draws_three_charts_per_queue(charted, query, span, per):
    body = page(charted, query)
    part = history_part(body)
    assert f"History, last {span} h" in part and per in part
    assert part.count("<svg") == 3 * len(QUEUES)
    for title in ("Throughput per", "Wait / run p95", "Depth"):
        assert part.count(title) >= len(QUEUES)
    assert part.count("<polyline") >= 3 * len(QUEUES)
    # the range shown is marked, the others are buttons of a GET form (no script needed)
    shown = f"{span}h"
    assert f"<b>{shown}</b>" in part and '<form class="ranges" method="get" action="/">' in part
    assert {r for r in ("1h", "24h", "72h") if r != shown} == set(re.findall(r'name="range" value="(\w+)"', part))
    # the refresh keeps the range
    want = "url=/" if shown == "1h" else f"url=/?range={shown}"
    assert f'content="2; {want}"' in body
    # nothing from elsewhere; the odd queue name escaped
    for reference in ("http://", "https://", "src=", "href=", "url(", "@import", "<link", "<script", "<img"):
        assert reference not in body, reference
    assert "&lt;b&gt;odd&lt;/b&gt;" in part and "<b>odd</b>" not in part
    assert "No minute kept" in part and "idle-queue" in part


def test_an_unknown_range_is_the_hour(charted):
    assert "History, last 1 h" in history_part(page(charted, "?range=5y"))


def test_the_charts_show_the_figures_qhistory_has(charted):
    """The last point of the 1 h throughput chart is the last minute's pushed and acked."""
    c = charted.client(protocol=2)
    last = dict(zip(*[iter(c.execute_command("QHISTORY", "orders")[-1])] * 2))
    part = history_part(page(charted))
    orders = part[part.index("<h3>orders</h3>"):]
    assert f"pushed {last[b'pushed']}<" in orders and f"acked {last[b'acked']}<" in orders


def test_history_off_says_so(tmp_path):
    d = http_daemon(tmp_path / "data", env={**DEBUG_ENV, "LEASEQ_HISTORY_HOURS": "0"})
    try:
        d.client().execute_command("QPUSH", unique("q"), "x")
        assert "History is off (history-hours 0)" in history_part(page(d))
    finally:
        d.kill()


def test_a_click_on_a_range_shows_that_range(charted, browser):
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
    browser.get(f"http://127.0.0.1:{charted.http}/")
    assert "HISTORY, LAST 1 H" in browser.find_element(By.ID, "history").text.upper()
    # (the page reloads itself every 2 s: an element found just before a reload goes stale, so ask again)
    wait = WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,))
    for shown in ("24h", "72h", "1h"):
        button = f"//form[@class='ranges']/button[text()='{shown}']"
        wait.until(lambda drv, b=button: drv.find_element(By.XPATH, b).click() or True)
        wait.until(lambda drv, s=shown: f"LAST {s[:-1]} H" in drv.find_element(By.ID, "history").text.upper())
        assert browser.current_url.endswith(f"/?range={shown}")
        wait.until(lambda drv: [s.size["width"] > 300 for s in drv.find_elements(By.CSS_SELECTOR, "figure.chart svg")]
                   == [True] * (3 * len(QUEUES)))
        screenshot(browser, f"history-{shown}.png")

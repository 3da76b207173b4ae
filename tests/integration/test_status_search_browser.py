"""The status page's search and a bulk action, clicked in headless Chromium
(the browser of test_status_browser.py): from a queue's Search button to
its matches, then "Cancel matches…", the confirmation naming the count,
and the notice after it.  With LEASEQ_SCREENSHOTS=dir the pages are saved
there (search-button.png, search-results.png, search-confirm.png,
search-done.png)."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import claim_one, qget, unique
from harness_http import log_in, notice, ops_client, press, screenshot


def test_an_operator_searches_and_cancels_every_match(page_daemon, browser):
    d = page_daemon
    c = ops_client(d)
    q = unique("checkout")
    acme = c.execute_command("QPUSHMANY", q, 12, *[f'{{"order": {i}, "sku": "A-{i}"}}' for i in range(12)],
                             "META", "customer", "acme", "traceparent", "00-4bf92f3577b34da6-00f067aa0ba902b7-01")
    c.execute_command("QPUSHMANY", q, 6, *[f'{{"order": {i}}}' for i in range(100, 106)],
                      "META", "customer", "globex")
    for _ in range(2):
        job = claim_one(c, q, "w", "LEASE", 600_000)
        c.execute_command("QNACK", q, job[b"lease"], "ERROR", "card declined: insufficient funds", "DEAD")
    log_in(browser, "ops", "opspass")
    browser.get(f"http://127.0.0.1:{d.http}/")
    screenshot(browser, "search-button.png")
    press(browser, f"Search: {q}")
    WebDriverWait(browser, 15).until(lambda drv: "/search?" in drv.current_url)
    browser.find_element(By.NAME, "meta_field").send_keys("customer")
    browser.find_element(By.NAME, "meta").send_keys("acme")
    browser.find_element(By.NAME, "match").send_keys('*"sku"*')
    browser.find_element(By.CSS_SELECTOR, "form.search button").click()
    WebDriverWait(browser, 15).until(lambda drv: "meta=acme" in drv.current_url)
    assert browser.find_element(By.ID, "match-count").text == "12"
    rows = browser.find_elements(By.CSS_SELECTOR, "#matches tbody tr")
    assert len(rows) == 12 and "card declined" in rows[0].text
    screenshot(browser, "search-results.png")

    browser.find_element(By.CSS_SELECTOR, f'button[title="Cancel matches of {q} '
                                          f'(payload *\\"sku\\"* · META customer = acme)"]').click()
    WebDriverWait(browser, 15).until(lambda drv: "/search/confirm" in drv.current_url)
    assert browser.find_element(By.ID, "question").text == \
        f'Cancel 10 jobs matching payload *"sku"* · META customer = acme in {q}?'
    screenshot(browser, "search-confirm.png")

    browser.find_element(By.ID, "confirm").click()
    assert notice(browser).startswith(
        f'Cancelled 10 of 10 jobs matching payload *"sku"* · META customer = acme in {q} (QCANCEL, 1 slice)')
    screenshot(browser, "search-done.png")
    assert [qget(c, q, i)[b"state"] for i in acme] == [b"dead"] * 2 + [b"cancelled"] * 10
    assert c.execute_command("QLEN", q) == 6

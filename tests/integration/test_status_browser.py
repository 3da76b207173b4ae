"""The status page's actions clicked in a real browser: headless Chromium
(Debian's chromium and chromium-driver) driven by Selenium.  An operator
logs in with HTTP Basic auth, pauses a queue, retries a dead letter,
cancels an in-flight job whose progress the page shows, deletes a ready job
and every dead letter of a queue; a read-only user's click is refused with
the daemon's sentence.  With LEASEQ_SCREENSHOTS=dir the screenshots of the
clicks are written there (docs/status-actions*.png were made so)."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import claim_one, qget, qinfo, unique
from harness_http import click, log_in, notice, ops_client, screenshot


def test_an_operator_acts_by_clicking(page_daemon, browser):
    d = page_daemon
    c = ops_client(d)
    emails, thumbs = unique("emails"), unique("thumbs")
    c.execute_command("QPUSHMANY", emails, 3, "welcome", "receipt", "reset")
    ids = c.execute_command("QPUSHMANY", thumbs, 4, "a.jpg", "b.jpg", "c.jpg", "d.jpg")
    for _ in range(2):
        job = claim_one(c, thumbs, "w", "LEASE", 600_000)
        c.execute_command("QNACK", thumbs, job[b"lease"], "ERROR", "PIL: cannot identify image file", "DEAD")
    running = claim_one(c, emails, "mailer-7", "LEASE", 600_000)
    c.execute_command("QPROGRESS", emails, running[b"lease"], "sent 40 of 90 recipients")
    log_in(browser, "ops", "opspass")
    browser.get(f"http://127.0.0.1:{d.http}/")
    assert "sent 40 of 90 recipients" in browser.find_element(By.TAG_NAME, "body").text
    screenshot(browser, "status-actions.png")

    click(browser, d, f"Pause: {emails}")
    assert notice(browser) == f"Paused queue {emails}."
    assert qinfo(c, emails)[b"paused"] == 1
    screenshot(browser, "status-actions-paused.png")

    click(browser, d, f"Cancel: job {running[b'id']} of {emails}")
    assert notice(browser) == f"1 job cancelled (QCANCEL job {running[b'id']} of {emails})."
    assert qget(c, emails, running[b"id"])[b"state"] == b"cancelled"

    dead = sorted(ids[:2])
    click(browser, d, f"Retry: job {dead[0]} of {thumbs}")
    assert notice(browser) == f"1 job retried (QREDRIVE job {dead[0]} of {thumbs})."
    assert qget(c, thumbs, dead[0])[b"state"] == b"ready"

    ready = c.execute_command("QPEEK", thumbs)
    first = dict(zip(ready[0][::2], ready[0][1::2]))[b"id"]
    click(browser, d, f"Delete: job {first} of {thumbs}")
    assert notice(browser) == f"1 job deleted (QDEL job {first} of {thumbs})."
    assert c.execute_command("QGET", thumbs, first) is None

    click(browser, d, f"Delete dead: {thumbs}")
    assert notice(browser) == f"1 job deleted (QPURGE queue {thumbs})."
    assert qinfo(c, thumbs)[b"dead"] == 0

    click(browser, d, f"Resume: {emails}")
    assert notice(browser) == f"Resumed queue {emails}."
    assert qinfo(c, emails)[b"paused"] == 0
    log = d.log()
    for command in ("QPAUSE", "QCANCEL", "QREDRIVE", "QDEL", "QPURGE", "QRESUME"):
        assert f"status page: user ops from 127.0.0.1 ran {command} " in log


def test_a_read_only_user_sees_the_refusal_and_nothing_changes(page_daemon, browser):
    d = page_daemon
    c = ops_client(d)
    q = unique("ro")
    c.execute_command("QPUSH", q, "x")
    log_in(browser, "viewer", "viewpass")
    click(browser, d, f"Pause: {q}")
    WebDriverWait(browser, 15).until(lambda drv: "/action/pause" in drv.current_url)
    assert browser.find_element(By.ID, "refusal").text == \
        "NOPERM User viewer has no permissions to run the 'qpause' command"
    assert browser.find_element(By.LINK_TEXT, "Back to the status page").get_attribute("href").endswith("/")
    screenshot(browser, "status-actions-refused.png")
    assert qinfo(c, q)[b"paused"] == 0
